//! Eureka's JSON: root-wrapped entities, `$`/`@enabled` ports, `@Auto` fields as strings,
//! arrays always arrays; read leniently (strings or numbers, `null` as absent, both spellings of
//! `overriddenStatus`, a bare integer port, a missing lease).

mod read;
mod write;

pub use read::{
    applications_from_value, instance_from_value, read_application, read_applications,
    read_instance,
};
pub(crate) use write::instance_value;
pub(crate) use write::write_applications_from;
pub use write::{write_application, write_applications, write_instance};
