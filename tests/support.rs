//! Shared test support: the mock LLM server, test tools and a harness around the
//! public [`orchestrate::Runtime`].

pub mod harness;
pub mod mock_llm;
pub(crate) mod nats;
