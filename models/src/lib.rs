//! Model files for canopy.

pub mod tokenizer;
