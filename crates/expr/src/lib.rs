//! postbox-expr
