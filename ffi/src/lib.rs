//! C ABI over the ironlock core (being written).
