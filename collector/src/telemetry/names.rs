//! Names of the collector's own health metrics (`commwatch_collector_*`), counted by [`super::Health`]. They
//! are part of the exported set ([`crate::export::names::ALL`]).

pub const COLLECTOR_BATCHES_TOTAL: &str = "commwatch_collector_batches_total";
pub const COLLECTOR_SAMPLES_TOTAL: &str = "commwatch_collector_samples_total";
pub const COLLECTOR_STREAMS: &str = "commwatch_collector_streams";
pub const COLLECTOR_REJECTED_STREAMS_TOTAL: &str = "commwatch_collector_rejected_streams_total";
pub const COLLECTOR_SUPERSEDED_STREAMS_TOTAL: &str = "commwatch_collector_superseded_streams_total";
pub const COLLECTOR_GAP_BATCHES_TOTAL: &str = "commwatch_collector_gap_batches_total";
pub const COLLECTOR_IMPLAUSIBLE_RATES_TOTAL: &str = "commwatch_collector_implausible_rates_total";
pub const COLLECTOR_SERIES_RESETS_TOTAL: &str = "commwatch_collector_series_resets_total";
pub const COLLECTOR_REFUSED_SAMPLES_TOTAL: &str = "commwatch_collector_refused_samples_total";
/// Series an agent described that the collector refuses (a metric or label name invalid or reserved here).
pub const COLLECTOR_REFUSED_SERIES_TOTAL: &str = "commwatch_collector_refused_series_total";
pub const COLLECTOR_OUT_OF_ORDER_SAMPLES_TOTAL: &str =
    "commwatch_collector_out_of_order_samples_total";
pub const COLLECTOR_INGEST_SECONDS: &str = "commwatch_collector_ingest_seconds";
pub const COLLECTOR_SCRAPE_SECONDS: &str = "commwatch_collector_scrape_seconds";
/// Time of one periodic pass over the fleet, by `pass` (`steps`: the step engine; `analysis_input`: copying
/// and analysing every node's windows for the rules), and the nodes the passes covered (counter): their ratio of
/// sums is the time per node.
pub const COLLECTOR_PASS_SECONDS: &str = "commwatch_collector_pass_seconds";
pub const COLLECTOR_PASS_NODES_TOTAL: &str = "commwatch_collector_pass_nodes_total";
/// CPU seconds of the passes' thread, by `pass` (what a pass costs, however busy the machine).
pub const COLLECTOR_PASS_CPU_SECONDS_TOTAL: &str = "commwatch_collector_pass_cpu_seconds_total";
/// Seconds of node traffic the step engine cut no steps from because it fell too far behind (counter,
/// summed over nodes: `super::Passes::steps_skipped_seconds`).
pub const COLLECTOR_STEPS_SKIPPED_SECONDS_TOTAL: &str =
    "commwatch_collector_steps_skipped_seconds_total";
/// CPU seconds of the collector's stages, by `stage` (`ingest`, `analysis`, `steps`, `render`, `remote_write`,
/// `history`, `other`), from their threads ([`super::stage_cpu`]).
pub const COLLECTOR_STAGE_CPU_SECONDS_TOTAL: &str = "commwatch_collector_stage_cpu_seconds_total";
pub const COLLECTOR_PERSIST_ERRORS_TOTAL: &str = "commwatch_collector_persist_errors_total";
pub const COLLECTOR_PERSIST_COMMITS_TOTAL: &str = "commwatch_collector_persist_commits_total";
/// Wall time of the persistence writer's commits, by `phase` ([`PERSIST_COMMIT_PHASES`]):
/// `crate::persist::CommitTimes`' phases in its order, `checkpoint` (never observed since the state database keeps a
/// rollback journal instead of the WAL; kept so that dashboards reading it find it) and `prune` (a prune's,
/// after the commit it follows, before its batches are acknowledged).
pub const COLLECTOR_PERSIST_COMMIT_SECONDS: &str = "commwatch_collector_persist_commit_seconds";
pub const PERSIST_COMMIT_PHASES: [&str; 6] =
    ["all", "lock_wait", "write", "sync", "checkpoint", "prune"];
/// Rows of the findings history pruned from the state database (retention), by `record` (`finding`,
/// `event`): [`crate::analysis::history::pruned_counter`].
pub const COLLECTOR_HISTORY_PRUNED_TOTAL: &str = "commwatch_collector_history_pruned_total";
pub const COLLECTOR_EXPIRED_NODES_TOTAL: &str = "commwatch_collector_expired_nodes_total";
/// Batches after which an agent stream was paused by `limits.max_samples_per_second`, and the time paused.
pub const COLLECTOR_THROTTLED_BATCHES_TOTAL: &str = "commwatch_collector_throttled_batches_total";
pub const COLLECTOR_THROTTLED_SECONDS_TOTAL: &str = "commwatch_collector_throttled_seconds_total";
/// HTTP connections (`/metrics`, `/api`, `/healthz`) open now (gauge), and those closed at accept because
/// `limits.max_http_connections` were open (counter).
pub const COLLECTOR_HTTP_CONNECTIONS: &str = "commwatch_collector_http_connections";
pub const COLLECTOR_HTTP_CONNECTIONS_REFUSED_TOTAL: &str =
    "commwatch_collector_http_connections_refused_total";
/// State-changing HTTP requests refused as possible cross-site forgeries, by `reason` (`origin`: a foreign
/// `Origin` or `Sec-Fetch-Site`; `content_type`: not JSON), see `commwatch_httpd::csrf`.
pub const COLLECTOR_HTTP_WRITES_REFUSED_TOTAL: &str =
    "commwatch_collector_http_writes_refused_total";
/// What the live page left out to stay within its bounds, by `what` (`cells`: heatmap links folded into a
/// class's last column; `rows`: nodes not drawn in the heatmap; `links`: rows of a node's link tables;
/// `findings`: findings not listed in a view; `jobs`: jobs not listed in the fleet's table), counted per
/// rendering.
pub const COLLECTOR_PAGE_OMITTED_TOTAL: &str = "commwatch_collector_page_omitted_total";
/// Page renderings refused because as many as `PAGE_RENDERS` were being rendered or sent (`503`).
pub const COLLECTOR_PAGE_BUSY_TOTAL: &str = "commwatch_collector_page_busy_total";
/// Step markers received in applied batches, by `result` (`accepted`, `invalid`: failed validation, dropped).
pub const COLLECTOR_STEP_MARKERS_TOTAL: &str = "commwatch_collector_step_markers_total";
/// gRPC connections (agents) open now (gauge), and those closed by the collector before any stream, by `reason`
/// ([`super::GRPC_REFUSE_REASONS`]: a connection limit, the handshake deadline, not HTTP/2, a failed TLS
/// handshake).
pub const COLLECTOR_GRPC_CONNECTIONS: &str = "commwatch_collector_grpc_connections";
pub const COLLECTOR_GRPC_CONNECTIONS_REFUSED_TOTAL: &str =
    "commwatch_collector_grpc_connections_refused_total";
/// Failed TLS handshakes on the gRPC listener, by `reason` ([`super::TLS_FAILURE_REASONS`]).
pub const COLLECTOR_TLS_HANDSHAKE_FAILURES_TOTAL: &str =
    "commwatch_collector_tls_handshake_failures_total";
/// 1 while the state directory cannot be written (batches are then not acknowledged), else 0.
pub const COLLECTOR_PERSIST_DEGRADED: &str = "commwatch_collector_persist_degraded";
/// State databases found unreadable at start, moved aside and replaced by an empty one.
pub const COLLECTOR_PERSIST_CORRUPT_DATABASES_TOTAL: &str =
    "commwatch_collector_persist_corrupt_databases_total";
/// Requests refused for their credentials, by `surface` ([`super::AUTH_SURFACES`]: `api`, a missing or wrong
/// bearer token under `/api/`; `page`, a wrong bearer token on the page; `login`, a wrong token typed at
/// `/login`).
pub const COLLECTOR_AUTH_FAILURES_TOTAL: &str = "commwatch_collector_auth_failures_total";
/// Samples refused because their timestamp lies outside the window around the collector's clock.
pub const COLLECTOR_OUT_OF_WINDOW_SAMPLES_TOTAL: &str =
    "commwatch_collector_out_of_window_samples_total";
/// Agent streams that ended by a transport failure (reset, broken pipe, keepalive timeout): not the agent's
/// fault, not counted as rejected.
pub const COLLECTOR_DROPPED_STREAMS_TOTAL: &str = "commwatch_collector_dropped_streams_total";
/// NCCL Inspector records refused at the collector's edge (dropped, the batch goes on), by `reason`
/// ([`super::COLLECTIVE_REFUSE_REASONS`]).
pub const COLLECTOR_REFUSED_COLLECTIVES_TOTAL: &str =
    "commwatch_collector_refused_collectives_total";
/// Always 1, labels `version` and `revision`: which build of commwatch is running.
pub const BUILD_INFO: &str = "commwatch_build_info";
/// Remote write (`[remote_write]`): samples by `result` (`sent`; `failed`: refused with 4xx or retried past
/// `retry_for`; `dropped`: evicted from the full queue or left at stop), requests by `result` (`sent`,
/// `retried`, `failed`), compressed request bytes sent, and the samples waiting in the queue now.
pub const COLLECTOR_REMOTE_WRITE_SAMPLES_TOTAL: &str =
    "commwatch_collector_remote_write_samples_total";
pub const COLLECTOR_REMOTE_WRITE_REQUESTS_TOTAL: &str =
    "commwatch_collector_remote_write_requests_total";
pub const COLLECTOR_REMOTE_WRITE_BYTES_TOTAL: &str = "commwatch_collector_remote_write_bytes_total";
pub const COLLECTOR_REMOTE_WRITE_QUEUE_SAMPLES: &str =
    "commwatch_collector_remote_write_queue_samples";
