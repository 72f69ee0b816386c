//! recursive-rlm (work in progress).
