//! Clients of registry servers: the REST client and the registrar.

mod eureka;
mod registrar;
mod transport;

pub use eureka::{ClientError, DEFAULT_MAX_ANSWER_BYTES, EurekaClient, Heartbeat};
pub use registrar::{Registrar, RegistrarHandle};
pub use transport::{TooLarge, Transport, TransportError};

/// `url` as logs and errors show it: a password in it (`http://user:password@host/`, how
/// Spring's clients and ours take credentials) replaced by `***`, and user information
/// without a password (`http://TOKEN@host/`, which may be a token) replaced whole.
pub fn redacted(url: &str) -> std::borrow::Cow<'_, str> {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.into();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let shown = match authority[..at].split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_owned(),
            };
            let host = &authority[at..];
            format!(
                "{}{shown}{host}{}",
                &url[..scheme_end],
                &url[authority_end..]
            )
            .into()
        }
        None => url.into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_in_a_url_is_not_shown() {
        assert_eq!(
            super::redacted("http://app:s3cret@10.0.0.1:8761/eureka/apps/"),
            "http://app:***@10.0.0.1:8761/eureka/apps/"
        );
        assert_eq!(
            super::redacted("https://app:p@ss@h/eureka/"),
            "https://app:***@h/eureka/"
        );
        assert_eq!(super::redacted("http://h:1/eureka/"), "http://h:1/eureka/");
        assert_eq!(
            super::redacted("http://TOKEN@h/eureka/"),
            "http://***@h/eureka/"
        );
        assert_eq!(super::redacted("http://h/a@b"), "http://h/a@b");
    }
}
