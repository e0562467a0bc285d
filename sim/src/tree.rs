//! Laying out a node's fake sysfs tree and rewriting its counter files in place.
//!
//! # Layout (per node, under `<root>/<node>/`)
//!
//! ```text
//! class/infiniband/mlx5_<g>/{hca_type, fw_ver, board_id, node_guid, sys_image_guid, node_type, node_desc}
//! class/infiniband/mlx5_<g>/ports/1/{rate, state, phys_state, link_layer, lid, sm_lid, lid_mask_count, cap_mask}
//! class/infiniband/mlx5_<g>/ports/1/counters/<PortCounter::ALL>
//! class/infiniband/mlx5_<g>/ports/1/hw_counters/<HwCounter::ALL> + lifespan
//! class/infiniband/mlx5_<g>/ports/1/gid_attrs/ndevs/0          → "ib<g>"
//! class/infiniband/mlx5_<g>/device/net/ib<g>                    → symlink to ../../../../net/ib<g>
//! class/net/ib<g>/{type=32, mtu=4092, operstate, carrier, speed, duplex, address, addr_len=20, ifindex, flags, tx_queue_len}
//! class/net/eth0/{type=1, mtu=1500, operstate, carrier, speed, duplex, address, addr_len=6, ifindex, flags, tx_queue_len}
//! class/net/<if>/statistics/<NetStat::ALL>
//! ```
//!
//! Contents mirror the kernel's formats (`200 Gb/sec (4X HDR)`, `4: ACTIVE`, `5: LinkUp`,
//! `InfiniBand`, `0x..` lids, `xxxx:xxxx:xxxx:xxxx` GUIDs), each value followed by a newline as
//! sysfs prints it.
//!
//! # Why files are rewritten in place
//!
//! Agents open counter files once and re-read them with `pread` at offset 0, as they do on a
//! real `/sys`. A rename would swap the inode under them and they would keep reading the old
//! file forever, so every update is `pwrite(value, offset 0)` on a descriptor held open, then
//! `ftruncate` only if the new text is shorter. Counters only grow (the model is monotonic and
//! `Cluster::advance_to` never goes back in time), so the text never gets shorter and a reader
//! never sees stale trailing digits. A reader racing a write may in principle see a torn value
//! (real sysfs has no such race); values are a few bytes within one page, which Linux copies
//! under the page lock, so in practice reads see the old or the new text.
//!
//! The link state files (`state`, `phys_state`, `operstate`, `carrier`) are static, except those of the
//! `flapping` variant's port and its IPoIB netdev, which are rewritten the same way whenever the port goes
//! down or up (a shorter text is followed by `ftruncate`, so a racing reader may see a torn value there).
//!
//! With the `rails8` variant a node has eight HCAs `mlx5_0..7` and IPoIB netdevs `ib0..7` whatever its GPUs.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::counters::{HwCounter, NetStat, PortCounter};
use crate::model::{seeded_u64, JobModel, Link};
use crate::SimError;

/// What a dynamic file shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Port(usize, PortCounter),
    Hw(usize, HwCounter),
    Net(Link, NetStat),
    /// `ports/1/state` of a flapping port.
    PortState(usize),
    /// `ports/1/phys_state` of a flapping port.
    PhysState(usize),
    /// `operstate` of the IPoIB netdev of a flapping port.
    Operstate(Link),
    /// `carrier` of the IPoIB netdev of a flapping port.
    Carrier(Link),
}

/// What a dynamic file holds: a counter, or a state text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    Counter(u64),
    Text(&'static str),
}

impl Source {
    pub(crate) fn value(
        self,
        model: &JobModel,
        node: usize,
        t: std::time::Duration,
    ) -> Result<Value, SimError> {
        Ok(match self {
            Source::Port(h, c) => Value::Counter(model.port_counter(node, h, c, t)?),
            Source::Hw(h, c) => Value::Counter(model.hw_counter(node, h, c, t)?),
            Source::Net(l, s) => Value::Counter(model.net_stat(node, l, s, t)?),
            Source::PortState(h) => Value::Text(model.port_state(node, h, t)?),
            Source::PhysState(h) => Value::Text(model.port_phys_state(node, h, t)?),
            Source::Operstate(l) => Value::Text(model.netdev_operstate(node, l, t)?),
            Source::Carrier(l) => Value::Text(model.netdev_carrier(node, l, t)?),
        })
    }
}

/// A counter file held open and rewritten in place.
#[derive(Debug)]
pub(crate) struct CounterFile {
    file: File,
    pub(crate) path: PathBuf,
    pub(crate) node: usize,
    pub(crate) source: Source,
    last: Option<Value>,
    len: usize,
}

impl CounterFile {
    fn create(path: PathBuf, node: usize, source: Source) -> Result<Self, SimError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| SimError::io("open", &path, e))?;
        Ok(CounterFile {
            file,
            path,
            node,
            source,
            last: None,
            len: 0,
        })
    }

    /// Writes `value` followed by a newline at offset 0 unless it is already there.
    pub(crate) fn write(&mut self, value: Value) -> Result<bool, SimError> {
        if self.last == Some(value) {
            return Ok(false);
        }
        let mut buf = [0u8; 24];
        let mut line = String::new();
        let text = match value {
            Value::Counter(v) => format_u64_line(v, &mut buf),
            Value::Text(s) => {
                line.push_str(s);
                line.push('\n');
                line.as_bytes()
            }
        };
        self.file
            .write_all_at(text, 0)
            .map_err(|e| SimError::io("write", &self.path, e))?;
        if text.len() < self.len {
            self.file
                .set_len(text.len() as u64)
                .map_err(|e| SimError::io("truncate", &self.path, e))?;
        }
        self.len = text.len();
        self.last = Some(value);
        Ok(true)
    }
}

/// Formats `v` as decimal digits plus `\n` into the tail of `buf`, returning that slice.
pub(crate) fn format_u64_line(mut v: u64, buf: &mut [u8; 24]) -> &[u8] {
    let mut i = buf.len() - 1;
    buf[i] = b'\n';
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

fn mkdir(p: &Path) -> Result<(), SimError> {
    fs::create_dir_all(p).map_err(|e| SimError::io("create dir", p, e))
}

fn put(dir: &Path, name: &str, content: &str) -> Result<(), SimError> {
    let p = dir.join(name);
    let mut text = String::with_capacity(content.len() + 1);
    text.push_str(content);
    text.push('\n');
    fs::write(&p, text).map_err(|e| SimError::io("write", &p, e))
}

fn guid_text(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// Writes the static files of `node`'s tree under `node_root` and opens every counter file,
/// returning them (not yet written).
pub(crate) fn lay_out_node(
    model: &JobModel,
    node: usize,
    node_root: &Path,
) -> Result<Vec<CounterFile>, SimError> {
    let ib_root = node_root.join("class").join("infiniband");
    let net_root = node_root.join("class").join("net");
    let hcas = model.hca_count();
    let mut files = Vec::new();
    for g in 0..hcas {
        lay_out_hca(model, node, g, &ib_root, &mut files)?;
    }
    let mut netdevs: Vec<Link> = vec![Link::Eth0];
    netdevs.extend((0..hcas).map(Link::Ipoib));
    for (ifindex, link) in netdevs.into_iter().enumerate() {
        lay_out_netdev(model, node, ifindex, link, &net_root, &mut files)?;
    }
    Ok(files)
}

/// `class/infiniband/mlx5_<g>` of `node`: static files, and its counter files added to `files`.
fn lay_out_hca(
    model: &JobModel,
    node: usize,
    g: usize,
    ib_root: &Path,
    files: &mut Vec<CounterFile>,
) -> Result<(), SimError> {
    let seed = model.spec().seed;
    let hcas = model.hca_count();
    let node_label = model.node_name(node)?;
    let hca = model.hca(node, g)?;
    let dev = ib_root.join(format!("mlx5_{g}"));
    mkdir(&dev)?;
    // Mellanox OUI b8:ce:f6 with seeded low bits, as ConnectX GUIDs look.
    let guid = 0xb8ce_f603_0000_0000 | (seeded_u64(seed, node, g as u64, 30) & 0xffff_ffff);
    put(&dev, "hca_type", "MT4129")?;
    put(&dev, "fw_ver", "28.39.1002")?;
    put(&dev, "board_id", "MT_0000000838")?;
    put(&dev, "node_guid", &guid_text(guid))?;
    put(&dev, "sys_image_guid", &guid_text(guid))?;
    put(&dev, "node_type", "1: CA")?;
    put(&dev, "node_desc", &format!("{node_label} mlx5_{g}"))?;
    let port = dev.join("ports").join("1");
    mkdir(&port)?;
    put(&port, "rate", &hca.rate_text)?;
    if hca.flapping {
        files.push(CounterFile::create(
            port.join("state"),
            node,
            Source::PortState(g),
        )?);
        files.push(CounterFile::create(
            port.join("phys_state"),
            node,
            Source::PhysState(g),
        )?);
    } else {
        put(&port, "state", "4: ACTIVE")?;
        put(&port, "phys_state", "5: LinkUp")?;
    }
    put(&port, "link_layer", "InfiniBand")?;
    put(&port, "lid", &format!("{:#x}", node * hcas + g + 1))?;
    put(&port, "sm_lid", "0x1")?;
    put(&port, "lid_mask_count", "0")?;
    put(&port, "cap_mask", "0xa751e848")?;
    let ndevs = port.join("gid_attrs").join("ndevs");
    mkdir(&ndevs)?;
    put(&ndevs, "0", &format!("ib{g}"))?;
    let dev_net = dev.join("device").join("net");
    mkdir(&dev_net)?;
    let link = dev_net.join(format!("ib{g}"));
    if fs::symlink_metadata(&link).is_ok() {
        fs::remove_file(&link).map_err(|e| SimError::io("remove", &link, e))?;
    }
    std::os::unix::fs::symlink(format!("../../../../net/ib{g}"), &link)
        .map_err(|e| SimError::io("symlink", &link, e))?;

    let counters = port.join("counters");
    mkdir(&counters)?;
    for c in PortCounter::ALL {
        files.push(CounterFile::create(
            counters.join(c.file_name()),
            node,
            Source::Port(g, c),
        )?);
    }
    let hw = port.join("hw_counters");
    mkdir(&hw)?;
    put(&hw, "lifespan", "12")?;
    for c in HwCounter::ALL {
        files.push(CounterFile::create(
            hw.join(c.file_name()),
            node,
            Source::Hw(g, c),
        )?);
    }
    Ok(())
}

/// `class/net/<link>` of `node` (interface index `ifindex + 2`): static files, and its statistics files
/// added to `files`.
fn lay_out_netdev(
    model: &JobModel,
    node: usize,
    ifindex: usize,
    link: Link,
    net_root: &Path,
    files: &mut Vec<CounterFile>,
) -> Result<(), SimError> {
    let seed = model.spec().seed;
    let nd = model.netdev(node, link)?;
    let dir = net_root.join(link.device_name());
    mkdir(&dir)?;
    let mac = seeded_u64(seed, node, 0x200 + ifindex as u64, 31);
    match link {
        Link::Eth0 => {
            put(&dir, "type", "1")?;
            put(&dir, "mtu", "1500")?;
            put(&dir, "addr_len", "6")?;
            let b = mac.to_be_bytes();
            put(
                &dir,
                "address",
                &format!("0c:42:a1:{:02x}:{:02x}:{:02x}", b[5], b[6], b[7]),
            )?;
            put(&dir, "broadcast", "ff:ff:ff:ff:ff:ff")?;
            put(&dir, "tx_queue_len", "1000")?;
            put(&dir, "flags", "0x1003")?;
        }
        _ => {
            put(&dir, "type", "32")?;
            put(&dir, "mtu", "4092")?;
            put(&dir, "addr_len", "20")?;
            let b = (0xb8ce_f603_0000_0000u64 | (mac & 0xffff_ffff)).to_be_bytes();
            let gid: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
            put(
                &dir,
                "address",
                &format!("00:00:10:49:fe:80:00:00:00:00:00:00:{}", gid.join(":")),
            )?;
            put(
                &dir,
                "broadcast",
                "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff",
            )?;
            put(&dir, "tx_queue_len", "256")?;
            put(&dir, "flags", "0x1003")?;
        }
    }
    if nd.flapping {
        files.push(CounterFile::create(
            dir.join("operstate"),
            node,
            Source::Operstate(link),
        )?);
        files.push(CounterFile::create(
            dir.join("carrier"),
            node,
            Source::Carrier(link),
        )?);
    } else {
        put(&dir, "operstate", "up")?;
        put(&dir, "carrier", "1")?;
    }
    put(&dir, "duplex", "full")?;
    put(&dir, "speed", &nd.speed_mbps.to_string())?;
    put(&dir, "ifindex", &(ifindex + 2).to_string())?;
    let stats = dir.join("statistics");
    mkdir(&stats)?;
    for s in NetStat::ALL {
        files.push(CounterFile::create(
            stats.join(s.file_name()),
            node,
            Source::Net(link, s),
        )?);
    }
    Ok(())
}
