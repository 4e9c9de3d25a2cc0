//! One `impl SplatBackend` per backend type, each only delegating to the ops' own modules
//! (`field/*.rs`, `project/*.rs`): the code of an op stays in its folder, and adding an op adds
//! one method to each block here.

mod autodiff;
#[cfg(feature = "cube")]
mod cube;
#[cfg(feature = "cube")]
mod fusion;
#[cfg(feature = "ndarray")]
mod ndarray;
