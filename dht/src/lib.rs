//! Placeholder
pub mod layout;
pub mod placement;
