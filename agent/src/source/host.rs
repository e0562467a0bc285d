//! host source
