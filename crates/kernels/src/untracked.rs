//! The ops whose results are not differentiable (a scene edit, an optimizer step, statistics
//! that steer densification, a level-of-detail cut) run on `Autodiff<B>` as `B`'s
//! implementation on the inner tensors, their results untracked: no graph node, no backward.
//! [`untracked_bundle!`] writes the moves of an op's struct of tensors between the two
//! backends, so that such an op's `autodiff.rs` is its trait impl alone.

/// A struct of an op's tensors on `Autodiff<B, C>` that moves to `B` and back untracked.
pub(crate) trait Untracked: Sized {
    /// The same struct on the inner backend.
    type Inner;
    /// The inner backend's tensors (any graph node dropped).
    fn into_inner(self) -> Self::Inner;
    /// The inner backend's tensors as untracked autodiff tensors.
    fn from_inner(inner: Self::Inner) -> Self;
}

/// `untracked_bundle!(Struct { float, fields; int fields; plain fields })` implements
/// [`Untracked`] for `Struct<Autodiff<B, C>>`: the float and int tensor fields move between the
/// backends, the plain fields are copied as they are (the `int` and `plain` parts are optional).
macro_rules! untracked_bundle {
    ($name:ident { $($float:ident),+ $(; int $($int:ident),+)? $(; plain $($plain:ident),+)? }) => {
        impl<
            B: burn::tensor::backend::Backend,
            C: burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy,
        > $crate::untracked::Untracked for $name<burn::backend::Autodiff<B, C>>
        {
            type Inner = $name<B>;

            fn into_inner(self) -> $name<B> {
                use burn::tensor::backend::AutodiffBackend;
                $name {
                    $($float: <burn::backend::Autodiff<B, C> as AutodiffBackend>::inner(self.$float),)+
                    $($($int: <burn::backend::Autodiff<B, C> as AutodiffBackend>::int_inner(self.$int),)+)?
                    $($($plain: self.$plain,)+)?
                }
            }

            fn from_inner(inner: $name<B>) -> Self {
                use burn::tensor::backend::AutodiffBackend;
                $name {
                    $($float: <burn::backend::Autodiff<B, C> as AutodiffBackend>::from_inner(inner.$float),)+
                    $($($int: <burn::backend::Autodiff<B, C> as AutodiffBackend>::int_from_inner(inner.$int),)+)?
                    $($($plain: inner.$plain,)+)?
                }
            }
        }
    };
}
pub(crate) use untracked_bundle;
