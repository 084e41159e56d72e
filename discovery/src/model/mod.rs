//! Eureka's data model and its two wire formats.

mod apps;
mod instance;
pub mod json;
mod text;
pub mod xml;

pub use apps::{Application, Applications, hashcode, parse_hashcode};
pub use instance::{
    ActionType, BadStatus, DEFAULT_DATA_CENTER_CLASS, DataCenterInfo, Instance, LeaseInfo, Port,
    Status,
};
pub(crate) use text::{
    instance_bad_key, instance_text_len, instance_unrepresentable, unrepresentable,
};

/// A body that is not an instance or registry document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// Not JSON.
    #[error("malformed JSON: {0}")]
    Json(String),
    /// Not XML.
    #[error("malformed XML: {0}")]
    Xml(String),
    /// Well-formed, but not the expected document.
    #[error("unexpected document: {0}")]
    Shape(String),
    /// A field of the wrong type.
    #[error("field `{field}`: {reason}")]
    Field {
        /// The field.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// The two formats Eureka speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/json`.
    Json,
    /// `application/xml`.
    Xml,
}

impl Format {
    /// As Eureka chooses: JSON only when `Accept` mentions json, XML otherwise (also with no
    /// `Accept` at all, which is what the Python client sends).
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.to_ascii_lowercase().contains("json") => Format::Json,
            _ => Format::Xml,
        }
    }

    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Xml => "application/xml",
        }
    }

    /// An instance in this format.
    pub fn instance(self, i: &Instance) -> Vec<u8> {
        match self {
            Format::Json => json::write_instance(i),
            Format::Xml => xml::write_instance(i),
        }
    }

    /// An application in this format.
    pub fn application(self, a: &Application) -> Vec<u8> {
        match self {
            Format::Json => json::write_application(a),
            Format::Xml => xml::write_application(a),
        }
    }

    /// A registry document in this format, into `out`, from applications made one at a time
    /// as they are written; `out` gets it an instance at a time, so a writer that passes it on
    /// (the response cache's gzip) never holds the whole text.
    pub(crate) fn applications_into(
        self,
        out: &mut impl std::io::Write,
        versions_delta: &str,
        apps_hashcode: &str,
        applications: impl Iterator<Item = Application>,
    ) -> std::io::Result<()> {
        match self {
            Format::Json => {
                json::write_applications_from(out, versions_delta, apps_hashcode, applications)
            }
            Format::Xml => {
                xml::write_applications_from(out, versions_delta, apps_hashcode, applications)
            }
        }
    }

    /// A registry document in this format.
    pub fn applications(self, a: &Applications) -> Vec<u8> {
        match self {
            Format::Json => json::write_applications(a),
            Format::Xml => xml::write_applications(a),
        }
    }
}

/// Reads a registration body: XML if the content type says so or the body starts with `<`,
/// JSON otherwise.
pub fn read_instance(
    content_type: Option<&str>,
    body: &[u8],
    now: u64,
) -> Result<Instance, ModelError> {
    let xml = content_type.is_some_and(|c| c.to_ascii_lowercase().contains("xml"))
        || body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'<');
    if xml {
        xml::read_instance(body, now)
    } else {
        json::read_instance(body, now)
    }
}
