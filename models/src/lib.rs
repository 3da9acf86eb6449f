//! Model files for canopy.

pub mod chat_template;
