//! recursive-tools (work in progress).
