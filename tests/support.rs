//! Shared test support: the mock LLM server and helpers.
pub mod mock_llm;
