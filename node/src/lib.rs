//! Node bindings (being written).
