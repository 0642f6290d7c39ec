//! How a lead or a worker proves itself to the servers, read from its
//! environment: a token (`NATS_TOKEN`) or an nkey seed (`NATS_NKEY`), both
//! key variables that no command a tool runs can see; and TLS: the servers'
//! authority (`NATS_TLS_CA`) and a client certificate (`NATS_TLS_CERT` with
//! its key `NATS_TLS_KEY`). A server not on this machine is joined only with
//! one of token, nkey or client certificate.

use std::path::PathBuf;

/// What a client joins the servers with.
#[derive(Clone, Default)]
pub struct Auth {
    token: Option<String>,
    nkey: Option<String>,
    ca: Option<PathBuf>,
    certificate: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the token nor the seed is ever shown.
        f.debug_struct("Auth")
            .field("token", &self.token.is_some())
            .field("nkey", &self.nkey.is_some())
            .field("ca", &self.ca)
            .field("certificate", &self.certificate)
            .finish()
    }
}

impl Auth {
    /// What `env` holds (empty values count as unset); a seed that is not
    /// one, a certificate without its key (or a key without its
    /// certificate), or a file that is not there, in one line.
    pub fn from_env(env: &impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let read = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let file = |name: &str| -> Result<Option<PathBuf>, String> {
            match read(name) {
                None => Ok(None),
                Some(path) => {
                    let path = PathBuf::from(path);
                    if path.is_file() {
                        Ok(Some(path))
                    } else {
                        Err(format!("{name}: {} is not a file", path.display()))
                    }
                }
            }
        };
        let nkey = read("NATS_NKEY");
        if let Some(seed) = &nkey
            && nkeys::KeyPair::from_seed(seed.trim()).is_err()
        {
            return Err("NATS_NKEY is not an nkey seed (it starts with S)".into());
        }
        let certificate = match (file("NATS_TLS_CERT")?, file("NATS_TLS_KEY")?) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (Some(_), None) => return Err("NATS_TLS_CERT needs its key in NATS_TLS_KEY".into()),
            (None, Some(_)) => {
                return Err("NATS_TLS_KEY needs its certificate in NATS_TLS_CERT".into());
            }
        };
        Ok(Self {
            token: read("NATS_TOKEN"),
            nkey: nkey.map(|s| s.trim().to_owned()),
            ca: file("NATS_TLS_CA")?,
            certificate,
        })
    }

    /// Whether it proves who the client is (a token, an nkey or a client
    /// certificate): what a server elsewhere requires.
    pub fn proves(&self) -> bool {
        self.token.is_some() || self.nkey.is_some() || self.certificate.is_some()
    }

    /// The client's options.
    pub(crate) fn options(&self) -> async_nats::ConnectOptions {
        // Two crypto providers are built in (the NATS client's and the HTTP
        // client's): TLS here uses ring, said once for the process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut options = async_nats::ConnectOptions::new();
        if let Some(token) = &self.token {
            options = options.token(token.clone());
        }
        if let Some(seed) = &self.nkey {
            options = options.nkey(seed.clone());
        }
        if let Some(ca) = &self.ca {
            options = options.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((cert, key)) = &self.certificate {
            options = options
                .add_client_certificate(cert.clone(), key.clone())
                .require_tls(true);
        }
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Auth, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Auth::from_env(&|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn what_proves_a_client_is_read_from_its_environment_and_never_shown() {
        assert!(!read(&[]).unwrap().proves());
        assert!(!read(&[("NATS_TOKEN", " ")]).unwrap().proves());
        let token = read(&[("NATS_TOKEN", "s3cret")]).unwrap();
        assert!(token.proves());
        assert!(!format!("{token:?}").contains("s3cret"));
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let nkey = read(&[("NATS_NKEY", &seed)]).unwrap();
        assert!(nkey.proves());
        assert!(!format!("{nkey:?}").contains(&seed));
        assert_eq!(
            read(&[("NATS_NKEY", "UABC")]).unwrap_err(),
            "NATS_NKEY is not an nkey seed (it starts with S)"
        );
        let dir = tempfile::tempdir().unwrap();
        let pem = dir.path().join("c.pem");
        std::fs::write(&pem, "x").unwrap();
        let pem = pem.to_str().unwrap();
        assert!(
            read(&[("NATS_TLS_CERT", pem), ("NATS_TLS_KEY", pem)])
                .unwrap()
                .proves()
        );
        assert_eq!(
            read(&[("NATS_TLS_CERT", pem)]).unwrap_err(),
            "NATS_TLS_CERT needs its key in NATS_TLS_KEY"
        );
        let missing = read(&[("NATS_TLS_CA", "/no/such.pem")]).unwrap_err();
        assert_eq!(missing, "NATS_TLS_CA: /no/such.pem is not a file");
        // An authority alone checks the servers; it proves nothing of the client.
        assert!(!read(&[("NATS_TLS_CA", pem)]).unwrap().proves());
    }
}
