//! The verbs transport through rdma-sys (cargo feature `rdma`): one device context, protection domain,
//! completion queue, RC queue pair and registered buffer per probe. The bulk of the buffer is the target of the
//! peer's RDMA WRITEs; its tail holds the ping-pong's send and receive slots. Every blocking verbs loop runs on
//! a blocking thread (`spawn_blocking`) with the resources moved there and back.

use std::ffi::CStr;
use std::os::raw::{c_int, c_uint};
use std::ptr;
use std::time::{Duration, Instant};

use rdma_sys::*;

use super::plan::{self, Ping, QpState, Window, WR_RECV, WR_SEND, WR_WRITE};
use crate::conn::{Conn, GRACE};
use crate::error::ProbeError;
use crate::pace;
use crate::params::MAX_PINGS;
use crate::transport::{Measure, Transport};
use crate::wire::{FrameKind, QpInfo, TransportKind};

/// Bytes of one ping slot (a sequence number).
const SLOT: usize = 8;
/// The port probed (perftest's default).
const PORT: u8 = 1;
/// Empty polls of the completion queue between two readings of the clock for the deadline: a clock read is
/// a system call where the clock source is not the TSC (a VM under emulation), longer than a poll.
const POLLS_PER_CLOCK_READ: u32 = 1024;
/// Pings between two readings of the clock for the end of the latency phase.
const PINGS_PER_CLOCK_READ: usize = 64;
/// Idle time of the answering side before it starts polling for pings; the asking side waits twice that
/// before its first ping. Both sides come to the ping-pong idle, as perftest's processes come to theirs from
/// their TCP handshake, not busy polling straight out of the bulk phase: the kernel's deferred packet work of
/// the bulk (softirqs, Soft-RoCE's tasks) then runs before two busy pollers take the CPUs.
const SETTLE: Duration = Duration::from_millis(100);

/// The CPU's tick counter, the latency phase's only timestamp inside its loop (perftest's `get_cycles`: the
/// time stamp counter on x86_64); elsewhere nanoseconds of the monotonic clock.
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86_64 CPU and reads a register; it has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Work request ids of one poll's completions (at most 16).
struct Completions {
    ids: [u64; 16],
    n: usize,
}

impl Completions {
    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.ids[..self.n].iter().copied()
    }
}

fn verbs_err(call: &str) -> ProbeError {
    ProbeError::Verbs(format!(
        "{call} failed: {}",
        std::io::Error::last_os_error()
    ))
}

/// The names of this host's RDMA devices.
pub fn devices() -> Result<Vec<String>, ProbeError> {
    let mut n: c_int = 0;
    // SAFETY: the list is freed below and its names copied before.
    unsafe {
        let list = ibv_get_device_list(&mut n);
        if list.is_null() {
            // ENOSYS: the kernel has no RDMA support at all; no device either way.
            return Err(ProbeError::NoRdmaDevice(format!(
                " (ibv_get_device_list: {})",
                std::io::Error::last_os_error()
            )));
        }
        let names = (0..n.max(0) as usize)
            .map(|i| {
                CStr::from_ptr(ibv_get_device_name(*list.add(i)))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        ibv_free_device_list(list);
        Ok(names)
    }
}

/// A seed for the first packet sequence number: the clock and the process.
fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ u64::from(std::process::id()).rotate_left(32)
}

/// The raw resources, moved to a blocking thread and back.
struct Res {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    mr: *mut ibv_mr,
    buf: Vec<u8>,
    /// Bytes of the bulk region at the start of `buf`.
    size: usize,
    lid: u16,
    gid: [u8; 16],
    mtu: ibv_mtu::Type,
    psn: u32,
    state: QpState,
    peer: Option<QpInfo>,
    /// Whether pings go inline (the queue pair took [`plan::PING_INLINE`] bytes, at least a slot).
    inline: bool,
}

// SAFETY: the verbs objects are used by one thread at a time (the transport is `&mut` everywhere and moved
// whole into a blocking task); libibverbs allows using them from any thread.
unsafe impl Send for Res {}

impl Drop for Res {
    fn drop(&mut self) {
        // SAFETY: each pointer is either null or what its create call returned, destroyed once, children first.
        unsafe {
            if !self.qp.is_null() {
                ibv_destroy_qp(self.qp);
            }
            if !self.mr.is_null() {
                ibv_dereg_mr(self.mr);
            }
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            if !self.ctx.is_null() {
                ibv_close_device(self.ctx);
            }
        }
    }
}

/// The RDMA transport.
pub struct Verbs {
    res: Option<Box<Res>>,
}

/// Opens `device` (or the first one) with a buffer for `size`-byte WRITEs, its queue pair in INIT.
pub fn open(device: Option<&str>, size: usize) -> Result<Verbs, ProbeError> {
    let names = devices()?;
    let index = match device {
        None if names.is_empty() => {
            return Err(ProbeError::NoRdmaDevice(
                " (ibv_get_device_list lists none)".into(),
            ))
        }
        None => 0,
        Some(d) => names.iter().position(|n| n == d).ok_or_else(|| {
            ProbeError::NoRdmaDevice(format!(
                " named {d:?} (found: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        })?,
    };
    // SAFETY: see `Res`; every call's result is checked before use.
    let res = unsafe { Res::open(index, size)? };
    Ok(Verbs {
        res: Some(Box::new(res)),
    })
}

impl Res {
    unsafe fn open(index: usize, size: usize) -> Result<Res, ProbeError> {
        let mut n: c_int = 0;
        // SAFETY: the caller's; the list outlives the open call.
        let ctx = unsafe {
            let list = ibv_get_device_list(&mut n);
            if list.is_null() || index >= n.max(0) as usize {
                return Err(verbs_err("ibv_get_device_list"));
            }
            let ctx = ibv_open_device(*list.add(index));
            ibv_free_device_list(list);
            ctx
        };
        if ctx.is_null() {
            return Err(verbs_err("ibv_open_device"));
        }
        let mut r = Res {
            ctx,
            pd: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            mr: ptr::null_mut(),
            buf: vec![0u8; size + 2 * SLOT],
            size,
            lid: 0,
            gid: [0; 16],
            mtu: ibv_mtu::IBV_MTU_1024,
            psn: plan::psn(seed()),
            state: QpState::Reset,
            peer: None,
            inline: false,
        };
        // SAFETY: `r` owns every object from here; Drop frees what was created if a later step fails.
        unsafe { r.create()? };
        Ok(r)
    }

    unsafe fn create(&mut self) -> Result<(), ProbeError> {
        // SAFETY: the caller's; pointers are checked after each call.
        unsafe {
            let mut port: ibv_port_attr = std::mem::zeroed();
            if ___ibv_query_port(self.ctx, PORT, &mut port) != 0 {
                return Err(verbs_err("ibv_query_port"));
            }
            self.lid = port.lid;
            self.mtu = port.active_mtu;
            let mut gid: ibv_gid = std::mem::zeroed();
            if ibv_query_gid(self.ctx, PORT, 0, &mut gid) != 0 {
                return Err(verbs_err("ibv_query_gid"));
            }
            self.gid = gid.raw;
            self.pd = ibv_alloc_pd(self.ctx);
            if self.pd.is_null() {
                return Err(verbs_err("ibv_alloc_pd"));
            }
            let depth = (plan::WINDOW + plan::RECV_DEPTH + 4) as c_int;
            self.cq = ibv_create_cq(self.ctx, depth, ptr::null_mut(), ptr::null_mut(), 0);
            if self.cq.is_null() {
                return Err(verbs_err("ibv_create_cq"));
            }
            let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
                | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE;
            self.mr = ibv_reg_mr(
                self.pd,
                self.buf.as_mut_ptr().cast(),
                self.buf.len(),
                access.0 as c_int,
            );
            if self.mr.is_null() {
                return Err(verbs_err("ibv_reg_mr"));
            }
            let mut init: ibv_qp_init_attr = std::mem::zeroed();
            init.send_cq = self.cq;
            init.recv_cq = self.cq;
            init.qp_type = ibv_qp_type::IBV_QPT_RC;
            init.cap.max_send_wr = plan::WINDOW + 4;
            init.cap.max_recv_wr = plan::RECV_DEPTH;
            init.cap.max_send_sge = 1;
            init.cap.max_recv_sge = 1;
            init.cap.max_inline_data = plan::PING_INLINE;
            self.qp = ibv_create_qp(self.pd, &mut init);
            if self.qp.is_null() {
                // A device without inline data: pings are read from the registered buffer.
                init.cap.max_inline_data = 0;
                self.qp = ibv_create_qp(self.pd, &mut init);
            }
            if self.qp.is_null() {
                return Err(verbs_err("ibv_create_qp"));
            }
            // The call writes back what the queue pair got.
            self.inline = init.cap.max_inline_data as usize >= SLOT;
            let mut a: ibv_qp_attr = std::mem::zeroed();
            a.qp_state = ibv_qp_state::IBV_QPS_INIT;
            a.pkey_index = 0;
            a.port_num = PORT;
            a.qp_access_flags = access.0;
            let mask = ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
                | ibv_qp_attr_mask::IBV_QP_PORT
                | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
            self.modify(&mut a, mask, QpState::Init)
        }
    }

    unsafe fn modify(
        &mut self,
        a: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        to: QpState,
    ) -> Result<(), ProbeError> {
        if !self.state.may_become(to) {
            return Err(ProbeError::Verbs(format!(
                "queue pair cannot go from {:?} to {to:?}",
                self.state
            )));
        }
        // SAFETY: the caller's; `qp` is live.
        if unsafe { ibv_modify_qp(self.qp, a, mask.0 as c_int) } != 0 {
            return Err(verbs_err(&format!("ibv_modify_qp to {to:?}")));
        }
        self.state = to;
        Ok(())
    }

    fn info(&self) -> QpInfo {
        // SAFETY: `qp` and `mr` are live for as long as `self`.
        let (qpn, rkey) = unsafe { ((*self.qp).qp_num, (*self.mr).rkey) };
        QpInfo {
            lid: self.lid,
            qpn,
            psn: self.psn,
            gid: plan::gid_to_hex(&self.gid),
            addr: self.buf.as_ptr() as u64,
            rkey,
            len: self.size as u64,
        }
    }

    /// Posts one receive into the receive slot.
    unsafe fn post_recv(&mut self) -> Result<(), ProbeError> {
        // SAFETY: the caller's; the slot lies inside the registered buffer.
        unsafe {
            let mut sge = ibv_sge {
                addr: self.buf.as_ptr().add(self.size + SLOT) as u64,
                length: SLOT as u32,
                lkey: (*self.mr).lkey,
            };
            let mut wr: ibv_recv_wr = std::mem::zeroed();
            wr.wr_id = WR_RECV;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            let mut bad = ptr::null_mut();
            if ibv_post_recv(self.qp, &mut wr, &mut bad) != 0 {
                return Err(verbs_err("ibv_post_recv"));
            }
        }
        Ok(())
    }

    /// INIT → RTR → RTS towards `peer`, with the ping receives posted first.
    unsafe fn connect(&mut self, peer: &QpInfo) -> Result<(), ProbeError> {
        let dgid = plan::check_peer(peer, self.size as u64).map_err(ProbeError::Verbs)?;
        // SAFETY: the caller's.
        unsafe {
            for _ in 0..plan::RECV_DEPTH {
                self.post_recv()?;
            }
            let mut a: ibv_qp_attr = std::mem::zeroed();
            a.qp_state = ibv_qp_state::IBV_QPS_RTR;
            a.path_mtu = self.mtu;
            a.dest_qp_num = peer.qpn;
            a.rq_psn = peer.psn;
            a.max_dest_rd_atomic = 1;
            a.min_rnr_timer = 12;
            a.ah_attr.dlid = peer.lid;
            a.ah_attr.port_num = PORT;
            if plan::needs_grh(peer) {
                a.ah_attr.is_global = 1;
                a.ah_attr.grh.dgid.raw = dgid;
                a.ah_attr.grh.hop_limit = 1;
                a.ah_attr.grh.sgid_index = 0;
            }
            let mask = ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_AV
                | ibv_qp_attr_mask::IBV_QP_PATH_MTU
                | ibv_qp_attr_mask::IBV_QP_DEST_QPN
                | ibv_qp_attr_mask::IBV_QP_RQ_PSN
                | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
                | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
            self.modify(&mut a, mask, QpState::Rtr)?;
            let mut a: ibv_qp_attr = std::mem::zeroed();
            a.qp_state = ibv_qp_state::IBV_QPS_RTS;
            a.timeout = 14;
            a.retry_cnt = 7;
            a.rnr_retry = 7;
            a.sq_psn = self.psn;
            a.max_rd_atomic = 1;
            let mask = ibv_qp_attr_mask::IBV_QP_STATE
                | ibv_qp_attr_mask::IBV_QP_TIMEOUT
                | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
                | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
                | ibv_qp_attr_mask::IBV_QP_SQ_PSN
                | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
            self.modify(&mut a, mask, QpState::Rts)?;
        }
        self.peer = Some(peer.clone());
        Ok(())
    }

    /// Polls completions until one arrives or `deadline` (busy: the clock is read once in
    /// [`POLLS_PER_CLOCK_READ`] empty polls); their work request ids. A timeout names the time this call
    /// waited.
    unsafe fn poll(&mut self, deadline: Instant) -> Result<Completions, ProbeError> {
        let mut entered = None;
        let mut empty = 0u32;
        // SAFETY: the caller's; `wc` has room for the 16 entries asked for, and only the `n` entries the call
        // wrote are read (no zeroing of 16 entries per call: this runs once or twice a ping).
        unsafe {
            let mut wc: std::mem::MaybeUninit<[ibv_wc; 16]> = std::mem::MaybeUninit::uninit();
            let wc_ptr = wc.as_mut_ptr().cast::<ibv_wc>();
            loop {
                let n = ibv_poll_cq(self.cq, 16, wc_ptr);
                if n < 0 {
                    return Err(verbs_err("ibv_poll_cq"));
                }
                if n > 0 {
                    let mut out = Completions {
                        ids: [0; 16],
                        n: n as usize,
                    };
                    let done = std::slice::from_raw_parts(wc_ptr, n as usize);
                    for (id, w) in out.ids.iter_mut().zip(done) {
                        if w.status != ibv_wc_status::IBV_WC_SUCCESS {
                            return Err(ProbeError::Verbs(format!(
                                "work request {} completed with status {}",
                                w.wr_id, w.status
                            )));
                        }
                        *id = w.wr_id;
                    }
                    return Ok(out);
                }
                empty += 1;
                if empty.is_multiple_of(POLLS_PER_CLOCK_READ) {
                    let now = Instant::now();
                    let since = *entered.get_or_insert(now);
                    if now > deadline {
                        return Err(ProbeError::Timeout(
                            deadline.saturating_duration_since(since),
                        ));
                    }
                }
                std::hint::spin_loop();
            }
        }
    }

    /// Posts one work request, signalled: an RDMA WRITE of the bulk region into the peer's, or a SEND of the
    /// send slot (inline where the queue pair allows it).
    unsafe fn post(&mut self, write: bool) -> Result<(), ProbeError> {
        // The peer's buffer, not the whole QpInfo: a copy of its GID string per post was an allocation per ping.
        let (remote_addr, rkey) = match &self.peer {
            Some(p) => (p.addr, p.rkey),
            None => return Err(ProbeError::Verbs("not connected".into())),
        };
        // SAFETY: the caller's; the scatter entry lies inside the registered buffer.
        unsafe {
            let (off, len) = if write {
                (0, self.size)
            } else {
                (self.size, SLOT)
            };
            let mut sge = ibv_sge {
                addr: self.buf.as_ptr().add(off) as u64,
                length: len as u32,
                lkey: (*self.mr).lkey,
            };
            let mut wr: ibv_send_wr = std::mem::zeroed();
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0 as c_uint;
            if !write && self.inline {
                wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0 as c_uint;
            }
            if write {
                wr.wr_id = WR_WRITE;
                wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.wr.rdma.remote_addr = remote_addr;
                wr.wr.rdma.rkey = rkey;
            } else {
                wr.wr_id = WR_SEND;
                wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
            }
            let mut bad = ptr::null_mut();
            if ibv_post_send(self.qp, &mut wr, &mut bad) != 0 {
                return Err(verbs_err("ibv_post_send"));
            }
        }
        Ok(())
    }

    /// RDMA WRITEs for `span`; bytes and seconds until the last completion. The window and each wait follow
    /// the rate measured so far ([`pace`]): on a slow path fewer writes are in flight and waits are longer, so
    /// the phase ends soon after `span` with a slow figure; a path with no completion for the wait fails.
    fn bulk(&mut self, span: Duration) -> Result<Measure, ProbeError> {
        let size = self.size as u64;
        let mut w = Window::new(size);
        let start = Instant::now();
        let stop = start + span;
        let mut progress = start;
        // SAFETY: connected queue pair; see `post` and `poll`.
        unsafe {
            loop {
                let now = Instant::now();
                let rate = pace::Rate {
                    bytes: w.bytes(),
                    seconds: now.duration_since(start).as_secs_f64(),
                };
                if now < stop {
                    let limit = pace::window(rate, size, u64::from(plan::WINDOW));
                    for _ in 0..w.room(limit) {
                        self.post(true)?;
                        w.on_posted(1);
                    }
                }
                if w.in_flight() == 0 {
                    break;
                }
                // FIFO completions: the next one is due within one write's time at the rate.
                let ids = self.poll(progress + pace::wait_for(rate, size, GRACE))?;
                let n = ids.iter().filter(|i| *i == WR_WRITE).count() as u64;
                w.on_completed(n).map_err(ProbeError::Verbs)?;
                if n > 0 {
                    progress = Instant::now();
                }
            }
        }
        Ok(Measure {
            bytes: w.bytes(),
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Sends `seq` from the send slot and waits for the peer's answer and the SEND's completion ([`Ping`]),
    /// then reposts the receive. The slot is rewritten only after the answer, so the peer had the bytes.
    unsafe fn exchange(&mut self, seq: u64, deadline: Instant) -> Result<u64, ProbeError> {
        let s = self.size;
        self.buf[s..s + SLOT].copy_from_slice(&seq.to_be_bytes());
        let mut p = Ping::default();
        // SAFETY: the caller's.
        unsafe {
            self.post(false)?;
            while !p.done() {
                for id in self.poll(deadline)?.iter() {
                    p.on_completion(id).map_err(ProbeError::Verbs)?;
                }
            }
            self.post_recv()?;
        }
        let mut got = [0u8; SLOT];
        got.copy_from_slice(&self.buf[s + SLOT..s + 2 * SLOT]);
        Ok(u64::from_be_bytes(got))
    }

    /// The latency phase, as perftest's `ib_send_lat` measures it: one tick reading before each ping's SEND
    /// and none inside the exchange ([`plan::round_trips`]), the clock read once in
    /// [`PINGS_PER_CLOCK_READ`] pings for the phase's end, the ticks converted with the clock's seconds over
    /// the whole phase.
    fn pings(&mut self, span: Duration) -> Result<Vec<Duration>, ProbeError> {
        // The settling is part of the phase's span (at most half of it).
        let stop = Instant::now() + span;
        std::thread::sleep((2 * SETTLE).min(span / 2));
        let start = Instant::now();
        let first = ticks();
        let mut stamps = Vec::with_capacity(4096);
        stamps.push(first);
        // SAFETY: connected queue pair.
        unsafe {
            loop {
                let seq = (stamps.len() - 1) as u64;
                let back = self.exchange(seq, stop + GRACE)?;
                if back != seq {
                    return Err(ProbeError::Protocol(format!("pong {back} for ping {seq}")));
                }
                stamps.push(ticks());
                let pings = stamps.len() - 1;
                if pings >= MAX_PINGS
                    || (pings.is_multiple_of(PINGS_PER_CLOCK_READ) && Instant::now() >= stop)
                {
                    break;
                }
            }
            let (last, seconds) = (ticks(), start.elapsed().as_secs_f64());
            // The end marker's own answer closes the server's loop.
            self.exchange(plan::PING_END, stop + GRACE)?;
            let per_tick = plan::seconds_per_tick(last.wrapping_sub(first), seconds)
                .ok_or_else(|| ProbeError::Verbs("the tick counter did not advance".into()))?;
            Ok(plan::round_trips(&stamps, per_tick))
        }
    }

    fn pongs(&mut self, span: Duration) -> Result<(), ProbeError> {
        let deadline = Instant::now() + span + GRACE;
        std::thread::sleep(SETTLE);
        let s = self.size;
        // SAFETY: connected queue pair; the receive slot is read after its completion.
        // Pong SENDs posted and completed: the last one is waited for before teardown.
        let (mut posted, mut completed) = (0u64, 0u64);
        unsafe {
            loop {
                let mut got = false;
                while !got {
                    for id in self.poll(deadline)?.iter() {
                        match id {
                            WR_RECV => got = true,
                            WR_SEND => completed += 1,
                            other => {
                                return Err(ProbeError::Verbs(format!(
                                    "unexpected completion {other}"
                                )))
                            }
                        }
                    }
                }
                let mut seq = [0u8; SLOT];
                seq.copy_from_slice(&self.buf[s + SLOT..s + 2 * SLOT]);
                self.post_recv()?;
                self.buf.copy_within(s + SLOT..s + 2 * SLOT, s);
                let seq = u64::from_be_bytes(seq);
                self.post(false)?;
                posted += 1;
                if seq == plan::PING_END {
                    // Every SEND, the end's last, completes before the queue pair may be torn down.
                    while completed < posted {
                        for id in self.poll(deadline)?.iter() {
                            completed += u64::from(id == WR_SEND);
                        }
                    }
                    return Ok(());
                }
            }
        }
    }
}

impl Verbs {
    /// Runs `f` on the resources on a blocking thread.
    async fn blocking<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Res) -> Result<R, ProbeError> + Send + 'static,
    ) -> Result<R, ProbeError> {
        let mut res = self
            .res
            .take()
            .ok_or_else(|| ProbeError::Verbs("resources lost".into()))?;
        let (res, r) = tokio::task::spawn_blocking(move || {
            let r = f(&mut res);
            (res, r)
        })
        .await
        .map_err(|e| ProbeError::Verbs(format!("verbs thread: {e}")))?;
        self.res = Some(res);
        r
    }

    fn res(&mut self) -> Result<&mut Res, ProbeError> {
        self.res
            .as_deref_mut()
            .ok_or_else(|| ProbeError::Verbs("resources lost".into()))
    }
}

/// Waits for the peer's END on the control connection.
async fn await_end(conn: &mut Conn, span: Duration) -> Result<(), ProbeError> {
    let h = conn.recv_header(span + GRACE * 2).await?;
    if h.kind != FrameKind::End {
        return Err(ProbeError::Protocol(format!(
            "{:?} frame instead of the end",
            h.kind
        )));
    }
    Ok(())
}

impl Transport for Verbs {
    fn kind(&self) -> TransportKind {
        TransportKind::Rdma
    }

    fn local_qp(&self) -> Option<QpInfo> {
        self.res.as_ref().map(|r| r.info())
    }

    fn connect(&mut self, peer: Option<&QpInfo>) -> Result<(), ProbeError> {
        let peer =
            peer.ok_or_else(|| ProbeError::Protocol("the peer sent no queue pair".into()))?;
        // SAFETY: the queue pair is in INIT and owned by `self`.
        unsafe { self.res()?.connect(peer) }
    }

    async fn send_bulk(
        &mut self,
        conn: &mut Conn,
        span: Duration,
        _size: usize,
    ) -> Result<Option<Measure>, ProbeError> {
        let m = self.blocking(move |r| r.bulk(span)).await?;
        conn.send_frame(FrameKind::End, &[]).await?;
        Ok(Some(m))
    }

    async fn recv_bulk(
        &mut self,
        conn: &mut Conn,
        span: Duration,
    ) -> Result<Option<Measure>, ProbeError> {
        // RDMA WRITE is one-sided: the receiver sees nothing until the sender says it is done.
        await_end(conn, span).await?;
        Ok(None)
    }

    async fn pings(
        &mut self,
        conn: &mut Conn,
        span: Duration,
    ) -> Result<Vec<Duration>, ProbeError> {
        let rtts = self.blocking(move |r| r.pings(span)).await?;
        conn.send_frame(FrameKind::End, &[]).await?;
        Ok(rtts)
    }

    async fn pongs(&mut self, conn: &mut Conn, span: Duration) -> Result<(), ProbeError> {
        self.blocking(move |r| r.pongs(span)).await?;
        await_end(conn, span).await
    }
}
