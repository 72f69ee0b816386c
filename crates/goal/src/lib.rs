//! recursive-goal (work in progress).
