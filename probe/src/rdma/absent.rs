//! The RDMA transport of a build without the `rdma` feature: opening it says so.

use std::time::Duration;

use crate::conn::Conn;
use crate::error::ProbeError;
use crate::transport::{Measure, Transport};
use crate::wire::{QpInfo, TransportKind};

/// Never constructed in this build.
pub enum Verbs {}

/// No devices can be listed without the feature.
pub fn devices() -> Result<Vec<String>, ProbeError> {
    Err(ProbeError::RdmaNotBuilt)
}

pub fn open(_device: Option<&str>, _size: usize) -> Result<Verbs, ProbeError> {
    Err(ProbeError::RdmaNotBuilt)
}

impl Transport for Verbs {
    fn kind(&self) -> TransportKind {
        match *self {}
    }
    fn local_qp(&self) -> Option<QpInfo> {
        match *self {}
    }
    fn connect(&mut self, _peer: Option<&QpInfo>) -> Result<(), ProbeError> {
        match *self {}
    }
    async fn send_bulk(
        &mut self,
        _c: &mut Conn,
        _s: Duration,
        _n: usize,
    ) -> Result<Option<Measure>, ProbeError> {
        match *self {}
    }
    async fn recv_bulk(
        &mut self,
        _c: &mut Conn,
        _s: Duration,
    ) -> Result<Option<Measure>, ProbeError> {
        match *self {}
    }
    async fn pings(&mut self, _c: &mut Conn, _s: Duration) -> Result<Vec<Duration>, ProbeError> {
        match *self {}
    }
    async fn pongs(&mut self, _c: &mut Conn, _s: Duration) -> Result<(), ProbeError> {
        match *self {}
    }
}
