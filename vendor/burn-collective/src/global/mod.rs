pub(crate) mod node;
pub(crate) mod shared;

#[cfg(feature = "orchestrator")]
pub mod orchestrator;
#[cfg(feature = "orchestrator")]
pub use orchestrator::*;

mod base;
pub use base::*;
