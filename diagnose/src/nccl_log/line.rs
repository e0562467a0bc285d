//! One line of a log: its `host:pid:tid [dev]` prefix, level and message.

/// Splits `host:pid:tid [dev] NCCL INFO msg` into (`host:pid:tid [dev]`, `INFO`, `msg`).
pub fn split_nccl_line(line: &str) -> Option<(&str, &str, &str)> {
    for (level, tag) in [
        ("INFO", " NCCL INFO "),
        ("WARN", " NCCL WARN "),
        ("ERROR", " NCCL ERROR "),
    ] {
        if let Some(pos) = line.find(tag) {
            return Some((&line[..pos], level, line[pos + tag.len()..].trim()));
        }
    }
    None
}

/// The host of a prefix: the `host` of its `host:pid:tid` token, in every form logs come in: plain,
/// after a `pdsh` prefix (`worker-0: worker-0:19487:21056 [3]`), with the host cut off by a space
/// (`NAME :70918:70918 [0]`, the host is the token before), with a source location after it (`h:1:2 [0]
/// misc/socket.cc:50`). `None` when the prefix has no such token (` [0] NCCL INFO …`).
pub fn host_of(prefix: &str) -> Option<String> {
    let tokens: Vec<&str> = prefix.split_whitespace().collect();
    for (i, t) in tokens.iter().enumerate() {
        let parts: Vec<&str> = t.rsplitn(3, ':').collect();
        let numeric = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
        if parts.len() != 3 || !numeric(parts[0]) || !numeric(parts[1]) {
            continue;
        }
        let host = match parts[2] {
            "" => tokens.get(i.checked_sub(1)?)?.trim_end_matches(':'),
            h => h,
        };
        return (!host.is_empty()).then(|| host.to_string());
    }
    None
}

/// `NCCL version 2.4.7+cuda9.2` in a line NCCL printed without its prefix.
pub fn version_in(line: &str) -> Option<String> {
    let pos = line.find("NCCL version ")?;
    let v = line[pos + "NCCL version ".len()..]
        .split_whitespace()
        .next()?;
    v.starts_with(|c: char| c.is_ascii_digit())
        .then(|| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_every_prefix_form() {
        let host = |line: &str| host_of(split_nccl_line(line).unwrap().0);
        assert_eq!(
            host("ip-172-31-0-11:45384:45384 [0] NCCL INFO NET/IB : No device found.").as_deref(),
            Some("ip-172-31-0-11")
        );
        assert_eq!(
            host("rdma-gpu-train-worker-0: rdma-gpu-train-worker-0:19487:21056 [3] NCCL INFO Using network IBext")
                .as_deref(),
            Some("rdma-gpu-train-worker-0")
        );
        assert_eq!(
            host("NAME :70918:70928 [0] NCCL INFO Using network Socket").as_deref(),
            Some("NAME")
        );
        assert_eq!(
            host("h:1:2 [0] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed")
                .as_deref(),
            Some("h")
        );
        assert_eq!(
            host(" [0] NCCL INFO Bootstrap : Using [0]br0:10.137.141.16<0>"),
            None
        );
        assert_eq!(
            host("<cluster_name>:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read")
                .as_deref(),
            Some("<cluster_name>")
        );
    }

    #[test]
    fn versions_without_a_prefix() {
        assert_eq!(
            version_in("NCCL version 2.4.7+cuda9.2").as_deref(),
            Some("2.4.7+cuda9.2")
        );
        assert_eq!(version_in("NCCL version unknown"), None);
    }
}
