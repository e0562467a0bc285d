//! Sysfs roots for the agent's sources, from the shared trees and the project's own additions.

use std::path::Path;

use crate::compose::{copy_tree, ComposeError, ComposedTree};
use crate::locate::workspace_root;

/// A whole `/sys/class/infiniband` of an H100 node (8 ConnectX-7 NDR ports, one BlueField-3 Ethernet bond),
/// in the shared data. Laid out as the HCAs themselves, not as a sysfs root.
pub const GPUD_H100_INFINIBAND: &str = "sysfs/gpud_h100/sys-class-infiniband-h100.0";

/// A sysfs root (`class/infiniband`, `class/net`, `devices`) in the shared data, read in place.
pub const NODE_EXPORTER_SYS: &str = "sysfs/node_exporter/sys";

/// The project's own additions to the H100 tree, relative to the workspace root: the RoCE bond's netdev
/// (`gid_attrs/ndevs/0`) and four network interfaces. Its README lists the values.
pub const H100_ADDITIONS: &str = "agent/tests/fixtures/h100_additions";

/// Writes the H100 sysfs root at `sys`: the shared `class/infiniband` (`infiniband`, see
/// [`GPUD_H100_INFINIBAND`]) with the project's `additions` over it.
pub fn write_gpud_h100(
    infiniband: &Path,
    additions: &Path,
    sys: &Path,
) -> Result<(), ComposeError> {
    copy_tree(infiniband, &sys.join("class/infiniband"))?;
    copy_tree(additions, sys)
}

/// The H100 node's sysfs root in a temporary directory (see [`write_gpud_h100`]), or `None` after a loud skip
/// when the shared tree is absent (a failure under `CI=true`, as [`crate::shared`]).
///
/// `manifest_dir` is the caller's `CARGO_MANIFEST_DIR`; [`crate::gpud_h100_sysfs!`] passes it.
#[track_caller]
pub fn gpud_h100(manifest_dir: &str) -> Option<ComposedTree> {
    let infiniband = crate::shared(manifest_dir, GPUD_H100_INFINIBAND)?;
    let additions = workspace_root(Path::new(manifest_dir)).join(H100_ADDITIONS);
    let compose = || -> Result<ComposedTree, ComposeError> {
        let tree = ComposedTree::new("sys")?;
        write_gpud_h100(&infiniband, &additions, tree.path())?;
        Ok(tree)
    };
    Some(compose().unwrap_or_else(|e| panic!("composing the H100 sysfs tree: {e}")))
}
