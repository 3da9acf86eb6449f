//! Model files for canopy.
