//! Tests of `http`.

use super::*;

fn url(text: &str) -> reqwest::Url {
    reqwest::Url::parse(text).unwrap()
}

#[test]
fn redirects_are_followed_only_within_the_origin_they_started_at() {
    let start = [url("https://api.example.com/v1/messages")];
    assert!(redirect(&url("https://api.example.com/v2/messages"), &start).is_ok());
    for elsewhere in [
        "https://evil.example/v1/messages",
        "http://api.example.com/v1/messages",
        "https://api.example.com:8443/v1/messages",
    ] {
        let refused = redirect(&url(elsewhere), &start).unwrap_err().to_string();
        assert!(refused.contains("another origin"), "{elsewhere}: {refused}");
    }
    // Back home through another origin is refused at the first hop already;
    // a chain that stays home is judged by where it started.
    let chain = [start[0].clone(), url("https://api.example.com/v2")];
    assert!(redirect(&url("https://api.example.com/v3"), &chain).is_ok());
    assert!(redirect(&url("https://other.example/v3"), &chain).is_err());
    let long: Vec<_> = (0..=MAX_REDIRECTS).map(|_| start[0].clone()).collect();
    assert!(matches!(
        redirect(&start[0], &long),
        Err(RedirectRefused::TooMany)
    ));
}
