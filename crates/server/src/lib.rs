//! postbox-server
