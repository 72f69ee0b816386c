//! recursive-llm (work in progress).
