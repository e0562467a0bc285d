//! The `commwatch.v1.Ingest` service as tonic serves it: what the generated `IngestServer` does (one method,
//! `Stream`; any other path `UNIMPLEMENTED`), with the collector's codec ([`ReceiveCodec`]): its stream task
//! receives each message as [`Received`], a batch with its bytes as they came when persistence is on, so that
//! they are persisted as received instead of encoded again.

use std::convert::Infallible;
use std::sync::Arc;

use commwatch_proto::codec::{ReceiveCodec, Received};
use commwatch_proto::v1 as pb;
use tonic::codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use super::replies::Replies;
use super::IngestService;

/// The one method's path.
const STREAM_PATH: &str = "/commwatch.v1.Ingest/Stream";

/// The `Ingest` service of `ingest` (for tonic's router).
#[derive(Clone)]
pub(crate) struct IngestServer {
    ingest: Arc<IngestService>,
    /// Largest message decoded, bytes (`limits.max_batch_bytes`): a larger one fails its stream.
    max_decoding_message_size: usize,
}

impl IngestServer {
    pub fn new(ingest: IngestService, max_decoding_message_size: usize) -> IngestServer {
        IngestServer {
            ingest: Arc::new(ingest),
            max_decoding_message_size,
        }
    }
}

impl NamedService for IngestServer {
    const NAME: &'static str = pb::ingest_server::SERVICE_NAME;
}

/// One `Stream` call.
struct StreamCall(Arc<IngestService>);

impl StreamingService<Received> for StreamCall {
    type Response = pb::CollectorMessage;
    type ResponseStream = Replies;
    type Future = BoxFuture<Response<Replies>, Status>;

    fn call(&mut self, request: Request<Streaming<Received>>) -> Self::Future {
        let ingest = self.0.clone();
        Box::pin(async move { Ok(ingest.stream(request)) })
    }
}

impl<B> Service<http::Request<B>> for IngestServer
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != STREAM_PATH {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        let call = StreamCall(self.ingest.clone());
        let codec = ReceiveCodec {
            keep_batch_bytes: self.ingest.keeps_batch_bytes(),
        };
        let mut grpc = Grpc::new(codec)
            .apply_max_message_size_config(Some(self.max_decoding_message_size), None);
        Box::pin(async move { Ok(grpc.streaming(call, req).await) })
    }
}
