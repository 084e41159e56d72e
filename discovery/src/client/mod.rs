//! Clients of registry servers: the REST client and the registrar.

mod eureka;
mod registrar;
mod transport;

pub use eureka::{ClientError, DEFAULT_MAX_ANSWER_BYTES, EurekaClient, Heartbeat};
pub use registrar::{Registrar, RegistrarHandle};
pub use transport::{TooLarge, Transport, TransportError};

/// `url` as logs and errors show it: a password in it (`http://user:password@host/`, how
/// Spring's clients and ours take credentials) replaced by `***`.
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
            let user = authority[..at].split(':').next().unwrap_or_default();
            let host = &authority[at..];
            format!(
                "{}{user}:***{host}{}",
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
        assert_eq!(super::redacted("http://h/a@b"), "http://h/a@b");
    }
}
