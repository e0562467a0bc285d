//! infiniband source
