//! Where WebFetch may go: never to a link-local address (`169.254.0.0/16`,
//! `fe80::/10`, and their IPv4-mapped forms), a cloud metadata address outside
//! them (AWS's `fd00:ec2::254`, Alibaba's `100.100.100.200`, Oracle's
//! `192.0.0.192`) or a cloud metadata name, where an instance's credentials are
//! served, whether the URL names the address or a DNS
//! name resolves to it (checked on the addresses the connection will use); and a
//! redirect is followed only within its site. Through a proxy from the
//! environment (`HTTP(S)_PROXY`, `ALL_PROXY`) only the URL itself is checked: the
//! proxy resolves the name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Cloud instance metadata services outside the link-local ranges.
const METADATA_V4: [Ipv4Addr; 2] = [
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
];
const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)];

/// True for a link-local address or a cloud metadata address, IPv4 or IPv6 (or
/// IPv4 mapped into IPv6, which reaches the same address as its IPv4 form).
pub(super) fn link_local_ip(ip: IpAddr) -> bool {
    let v4 = |ip: Ipv4Addr| ip.is_link_local() || METADATA_V4.contains(&ip);
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            (ip.segments()[0] & 0xffc0) == 0xfe80
                || METADATA_V6.contains(&ip)
                || ip.to_ipv4_mapped().is_some_and(v4)
        }
    }
}

/// True for a URL whose host is a link-local address or a cloud metadata name.
pub(super) fn link_local(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    match host.trim_matches(['[', ']']).parse::<IpAddr>() {
        Ok(ip) => link_local_ip(ip),
        Err(_) => {
            let name = host.trim_end_matches('.');
            name.eq_ignore_ascii_case("metadata.google.internal")
                || name.eq_ignore_ascii_case("metadata")
        }
    }
}

/// Whether a redirect from `from` to `to` stays on its site: the same host, and
/// the same scheme and port, or `http` upgraded to `https` on its default port. A
/// downgrade to `http`, or another port, is another server, reported rather than
/// followed.
pub(super) fn same_site(from: &Url, to: &Url) -> bool {
    if from.host_str() != to.host_str() {
        return false;
    }
    let same =
        from.scheme() == to.scheme() && from.port_or_known_default() == to.port_or_known_default();
    let upgraded = from.scheme() == "http" && to.scheme() == "https" && to.port().is_none();
    same || upgraded
}

/// The addresses a name resolved to that a fetch may connect to: none that is
/// link-local. An error when every one was.
pub(super) fn allowed(name: &str, addrs: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, String> {
    let found = addrs.len();
    let kept: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|a| !link_local_ip(a.ip()))
        .collect();
    if kept.is_empty() && found > 0 {
        return Err(format!(
            "{name} resolves to a link-local or cloud metadata address (instance credentials are served there); it is not fetched"
        ));
    }
    Ok(kept)
}

/// The system's resolver, with link-local addresses taken out of every answer.
#[derive(Debug)]
pub(super) struct GuardedResolver;

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept = allowed(&host, found)?;
            let addrs: Addrs = Box::new(kept.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn a_redirect_is_followed_on_its_own_site_only() {
        let from = url("http://docs.rs/x");
        assert!(same_site(&from, &url("http://docs.rs/y")));
        assert!(same_site(&from, &url("https://docs.rs/y")));
        assert!(same_site(&from, &url("http://docs.rs:80/y")));
        assert!(!same_site(&from, &url("https://docs.rs:8443/y")));
        assert!(!same_site(&from, &url("http://docs.rs:8080/y")));
        assert!(!same_site(&from, &url("http://evil.rs/y")));
        assert!(!same_site(
            &url("https://docs.rs/x"),
            &url("http://docs.rs/y")
        ));
    }

    #[test]
    fn link_local_answers_of_a_name_are_dropped_and_only_link_local_is_refused() {
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 0);
        let mixed = vec![at("169.254.169.254"), at("93.184.216.34"), at("fe80::1")];
        assert_eq!(allowed("x.com", mixed), Ok(vec![at("93.184.216.34")]));
        for metadata in [
            "fd00:ec2::254",
            "100.100.100.200",
            "192.0.0.192",
            "::ffff:100.100.100.200",
        ] {
            assert!(link_local_ip(metadata.parse().unwrap()), "{metadata}");
        }
        assert!(!link_local_ip("100.100.100.201".parse().unwrap()));
        let metadata = vec![at("169.254.169.254"), at("::ffff:169.254.169.254")];
        let refused = allowed("rebind.example", metadata).unwrap_err();
        assert!(
            refused
                .starts_with("rebind.example resolves to a link-local or cloud metadata address"),
            "{refused}"
        );
    }
}
