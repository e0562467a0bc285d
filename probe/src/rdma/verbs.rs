//! RDMA verbs (rdma-sys): written next.
