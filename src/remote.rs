//! Sub-agents on other machines, over NATS JetStream: a task sealed by its
//! lead and opened only by a worker that trusts it ([`envelope`]), and the
//! lead's key kept in the person's state folder ([`lead_key`]).

pub mod auth;
pub mod envelope;
pub mod hooks;
pub mod journals;
mod keys;
pub mod launcher;
pub mod lead;
pub mod store;
pub mod subjects;
pub mod worker;
pub mod workspace;

pub use self::keys::lead_key;
