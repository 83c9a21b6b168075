//! postbox-store
