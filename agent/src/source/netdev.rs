//! netdev source
