//! One line of a log: its `host:pid:tid [dev]` prefix, level and message.

/// Splits `host:pid:tid [dev] NCCL INFO msg` into (`host:pid:tid [dev]`, `INFO`, `msg`), in every form:
/// with or without the `host:pid:tid [dev]` part (`NCCL INFO msg` at the start of a line), and without the
/// word `NCCL` as before NCCL 2.3 (`host:1:2 [0] INFO msg`, `host:1:2 [0] include/socket.h:360 WARN msg`).
pub fn split_nccl_line(line: &str) -> Option<(&str, &str, &str)> {
    for (level, tag) in [
        ("INFO", "NCCL INFO "),
        ("WARN", "NCCL WARN "),
        ("ERROR", "NCCL ERROR "),
    ] {
        if let Some(pos) = line.find(tag) {
            if pos == 0 || line.as_bytes()[pos - 1] == b' ' {
                return Some((
                    line[..pos].trim_end(),
                    level,
                    line[pos + tag.len()..].trim(),
                ));
            }
        }
    }
    for (level, tag) in [("INFO", " INFO "), ("WARN", " WARN ")] {
        let Some(pos) = line.find(tag) else {
            continue;
        };
        let before: Vec<&str> = line[..pos].split_whitespace().collect();
        let device = |t: &str| {
            t.strip_prefix('[')
                .and_then(|t| t.strip_suffix(']'))
                .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
        };
        let tagged = match before.as_slice() {
            [.., d] if device(d) => true,
            [.., d, src] if device(d) && src.contains(':') => true,
            _ => false,
        };
        if tagged {
            return Some((&line[..pos], level, line[pos + tag.len()..].trim()));
        }
    }
    None
}

/// `init.cc:1234 -> 2` (`bootstrap.cu:28 -> 2 [Net]`): NCCL returning an error up its calls: (site, code).
pub fn error_return(msg: &str) -> Option<(&str, u32)> {
    let (site, rest) = msg.split_once(" -> ")?;
    let site = site.trim();
    if site.contains(' ') || !site.contains(':') {
        return None;
    }
    let code = rest.split_whitespace().next()?.parse().ok()?;
    Some((site, code))
}

/// A line outside NCCL's own that reports a failure: nccl-tests' (`NCCL failure all_reduce.cu:95 '…'`,
/// `Test NCCL failure …`), a framework's (`RuntimeError: NCCL error …`, `unhandled system error`), a signal.
pub fn failure_in(line: &str) -> Option<String> {
    const MARKERS: [&str; 11] = [
        "NCCL failure ",
        "CUDA failure ",
        "NCCL error in:",
        "unhandled system error",
        "unhandled cuda error",
        "Segmentation fault",
        "exited on signal",
        "Caught signal",
        "core dumped",
        "Exited with exit code",
        "exited with non-zero status",
    ];
    let lower = line.to_ascii_lowercase();
    MARKERS
        .iter()
        .any(|m| lower.contains(&m.to_ascii_lowercase()))
        .then(|| line.trim().to_string())
}

/// A results table row (`8 2 float sum -1 …`): the run was past its init.
pub fn is_result_row(line: &str) -> bool {
    let tokens: Vec<&str> = line.split_whitespace().collect();
    tokens.len() >= 8
        && tokens[0].bytes().all(|b| b.is_ascii_digit())
        && tokens[1].bytes().all(|b| b.is_ascii_digit())
        && tokens[2].bytes().any(|b| b.is_ascii_alphabetic())
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

pub use crate::lines::version_in;

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
    fn lines_of_every_generation() {
        let split = |l| split_nccl_line(l).map(|(p, lvl, m)| (p.to_string(), lvl, m.to_string()));
        assert_eq!(
            split("gpu-1:18553:18553 [0] INFO NET : Using interface enp3s0:192.168.144.103<0>"),
            Some((
                "gpu-1:18553:18553 [0]".to_string(),
                "INFO",
                "NET : Using interface enp3s0:192.168.144.103<0>".to_string()
            ))
        );
        assert_eq!(
            split("gpu-1:1:2 [0] include/socket.h:360 WARN Call to connect failed : Connection timed out")
                .map(|x| x.1),
            Some("WARN")
        );
        assert_eq!(
            split("NCCL INFO Connected all trees"),
            Some((String::new(), "INFO", "Connected all trees".to_string()))
        );
        assert_eq!(split("INFO: nothing to see"), None);
        assert_eq!(split("Using NCCL INFOX"), None);
        assert_eq!(error_return("init.cu:420 -> 2"), Some(("init.cu:420", 2)));
        assert_eq!(
            error_return("bootstrap.cu:28 -> 2 [Net]"),
            Some(("bootstrap.cu:28", 2))
        );
        assert_eq!(error_return("Trees [0] 1/-1/-1->0->-1"), None);
    }

    #[test]
    fn versions_without_a_prefix() {
        assert_eq!(
            version_in("RCCL version 2.18.3+hip6.0 HEAD:2f6d59e+").as_deref(),
            Some("2.18.3+hip6.0")
        );
        assert_eq!(
            version_in("NCCL version 2.4.7+cuda9.2").as_deref(),
            Some("2.4.7+cuda9.2")
        );
        assert_eq!(version_in("NCCL version unknown"), None);
    }
}
