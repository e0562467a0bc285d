//! Why the store refused an inventory or a batch. The checks are those only the store can make (they need
//! the node's current state); the ingest edge turns each into the stream's status.

/// An inventory or batch the store cannot apply; nothing of it was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The node would hold more series (or links) than `limits.max_series`. `field` names the part of the
    /// message that overflowed (`hello.inventory.series`, `inventory_update.inventory.links`, ...).
    #[error("{field}: {count} {what}, limit {limit}")]
    TooMany {
        field: &'static str,
        what: &'static str,
        count: usize,
        limit: usize,
    },
    /// A Hello named a node the store does not hold while it holds `limits.max_nodes` nodes.
    #[error("hello.node: {count} nodes held, limit {limit}")]
    TooManyNodes { count: usize, limit: usize },
    /// A series names a link the instance did not describe.
    #[error("series {series} names link {link}, which was not described")]
    UndescribedLink { series: u32, link: u32 },
    /// A series id described again with another identity or kind (descriptors are append-only).
    #[error("series {series} described again with a different meaning")]
    Redescribed { series: u32 },
    /// A batch names a series id the instance did not describe; `index` is its position in the batch.
    #[error("batch.series_ids[{index}]: series {id} was not described on this instance")]
    UndescribedSeries { index: usize, id: u32 },
}
