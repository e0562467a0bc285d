//! The collector's wire decode path: prost decode of an agent message, then the edge validation into domain
//! types. Garbage must become an error, never a panic.
#![no_main]
use commwatch_collector::ingest::domain::{Batch, Hello};
use commwatch_proto::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = pb::AgentMessage::decode(data) else {
        return;
    };
    match msg.msg {
        Some(pb::agent_message::Msg::Hello(h)) => {
            let _ = Hello::try_from(h);
        }
        Some(pb::agent_message::Msg::Batch(b)) => {
            let _ = Batch::try_from(b);
        }
        _ => {}
    }
});
