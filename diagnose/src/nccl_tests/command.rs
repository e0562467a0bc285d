//! What a command line pasted with the output says about the run that follows: the nccl-tests binary it runs
//! (`./build/all_gather_perf -b 1G …`) and the processes its launcher starts (`mpirun -np 1024 …`).

/// The launcher of a command line, which decides how its options read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `mpirun`, `mpiexec` (Open MPI, MPICH, Intel MPI): `-np`, `-n`, `-c`, `--np`, `--n`.
    Mpi,
    /// Slurm's `srun`: `-n`, `--ntasks` (`-N` counts nodes, `-c` CPUs per task).
    Srun,
}

/// The launcher a line starts, when one of its tokens is `mpirun`, `mpiexec` or `srun` (with any path).
pub fn launcher_in(tokens: &[&str]) -> Option<(Launcher, usize)> {
    tokens
        .iter()
        .enumerate()
        .find_map(|(i, t)| match t.rsplit('/').next().unwrap_or(t) {
            "mpirun" | "mpiexec" | "orterun" => Some((Launcher::Mpi, i)),
            "srun" => Some((Launcher::Srun, i)),
            _ => None,
        })
}

/// The process count among a launcher's options; `None` when they do not give one. A count of 0 is passed
/// over (`-c 0` beside `-np 1024` in a real command line cannot be what ran). Slurm's nodes times tasks per
/// node (`--nodes=4 --ntasks-per-node=8`) count where no task count is given.
pub fn processes_in(launcher: Launcher, tokens: &[&str]) -> Option<u32> {
    tasks_in(launcher, tokens).or_else(|| match launcher {
        Launcher::Srun => {
            let nodes = srun_option(tokens, "-N", "--nodes")?;
            let per_node = srun_option(tokens, "", "--ntasks-per-node")?;
            nodes.checked_mul(per_node).filter(|n| *n > 0)
        }
        Launcher::Mpi => None,
    })
}

/// The nodes a launcher's options name: Slurm's `-N`/`--nodes`; for MPI the distinct hosts of `-H`/`--host`,
/// else the processes over the processes per node (`-npernode`, `-N`, `-ppn`, `--map-by ppr:8:node`).
pub fn nodes_in(launcher: Launcher, tokens: &[&str]) -> Option<u32> {
    match launcher {
        Launcher::Srun => srun_option(tokens, "-N", "--nodes").filter(|n| *n > 0),
        Launcher::Mpi => {
            let value = |keys: &[&str]| {
                tokens.iter().enumerate().find_map(|(i, t)| {
                    keys.iter().find_map(|k| {
                        if t == k {
                            tokens.get(i + 1).map(|v| v.to_string())
                        } else {
                            t.strip_prefix(&format!("{k}=")).map(str::to_string)
                        }
                    })
                })
            };
            if let Some(hosts) = value(&["-H", "--host", "-host", "--hosts", "-hosts"]) {
                let mut names: Vec<&str> = hosts
                    .split(',')
                    .map(|h| h.split(':').next().unwrap_or(h))
                    .filter(|h| !h.is_empty())
                    .collect();
                names.sort_unstable();
                names.dedup();
                return Some(names.len() as u32).filter(|n| *n > 0);
            }
            let ppn = value(&["-npernode", "--npernode", "-N", "-ppn", "--ppn", "-perhost"])
                .and_then(|v| v.parse::<u32>().ok())
                .or_else(|| {
                    value(&["--map-by", "-map-by"]).and_then(|m| {
                        let rest = m.strip_prefix("ppr:")?;
                        let (n, unit) = rest.split_once(':')?;
                        unit.starts_with("node").then(|| n.parse().ok()).flatten()
                    })
                })
                .filter(|n| *n > 0)?;
            let np = tasks_in(Launcher::Mpi, tokens)?;
            Some(np.div_ceil(ppn))
        }
    }
}

/// An srun option's number: `-N 4`, `-N4`, `--nodes 4`, `--nodes=4` (a range `2-4` is no count).
fn srun_option(tokens: &[&str], short: &str, long: &str) -> Option<u32> {
    tokens.iter().enumerate().find_map(|(i, t)| {
        let next = || tokens.get(i + 1).and_then(|v| v.parse::<u32>().ok());
        if *t == long || (!short.is_empty() && *t == short) {
            return next();
        }
        t.strip_prefix(long)
            .and_then(|v| v.strip_prefix('='))
            .or_else(|| (!short.is_empty()).then(|| t.strip_prefix(short)).flatten())
            .filter(|v| !v.is_empty())
            .and_then(|v| v.parse().ok())
    })
}

/// The explicit task count among a launcher's options.
fn tasks_in(launcher: Launcher, tokens: &[&str]) -> Option<u32> {
    for (i, t) in tokens.iter().enumerate() {
        let next = || tokens.get(i + 1).and_then(|v| v.parse::<u32>().ok());
        let value = match (launcher, *t) {
            (Launcher::Mpi, "-np" | "-n" | "-c" | "--np" | "--n") => next(),
            (Launcher::Srun, "-n" | "--ntasks") => next(),
            (Launcher::Srun, t) => t
                .strip_prefix("--ntasks=")
                .or_else(|| t.strip_prefix("-n").filter(|v| !v.is_empty()))
                .and_then(|v| v.parse().ok()),
            (Launcher::Mpi, t) => t.strip_prefix("-np=").and_then(|v| v.parse().ok()),
        };
        if value.is_some_and(|v| v > 0) {
            return value;
        }
    }
    None
}

/// The nccl-tests (or rccl-tests) binary a line names: a token whose last path component ends in `_perf` or
/// `_perf_mpi`, returned as that component without the `_mpi`.
pub fn binary_in(tokens: &[&str]) -> Option<String> {
    tokens.iter().find_map(|t| {
        let t = t.trim_matches(|c: char| "'\"`,;()".contains(c));
        let name = t.rsplit('/').next().unwrap_or(t);
        let name = name.strip_suffix("_mpi").unwrap_or(name);
        let stem = name.strip_suffix("_perf")?;
        (!stem.is_empty() && stem.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            .then(|| name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<&str> {
        s.split_whitespace().collect()
    }

    #[test]
    fn launchers_and_their_process_counts() {
        let line = words("mpirun --allow-run-as-root -c 0 -np 1024 -x NCCL_SOCKET_NTHREADS=2");
        let (l, at) = launcher_in(&line).unwrap();
        assert_eq!((l, at), (Launcher::Mpi, 0));
        assert_eq!(processes_in(l, &line), Some(1024));
        assert_eq!(
            processes_in(l, &words("mpirun -np 16 -npernode 8")),
            Some(16)
        );
        assert_eq!(
            processes_in(l, &words("mpirun -npernode 8 --hostfile h")),
            None
        );
        assert_eq!(processes_in(l, &words("mpirun -c 2 --hostfile h")), Some(2));
        let srun = words("$ srun -N2 -c 8 --ntasks=8 all_reduce_perf");
        let (l, _) = launcher_in(&srun).unwrap();
        assert_eq!(processes_in(l, &srun), Some(8));
        assert_eq!(processes_in(l, &words("srun -N2 -n16 x")), Some(16));
        assert_eq!(
            processes_in(l, &words("srun -N2 --gpus-per-node=4 x")),
            None
        );
        assert_eq!(
            processes_in(l, &words("srun --nodes=4 --ntasks-per-node=8 --label")),
            Some(32)
        );
        assert_eq!(
            processes_in(l, &words("srun -N 2 --ntasks-per-node 4")),
            Some(8)
        );
        assert_eq!(
            nodes_in(l, &words("srun -N 2 --ntasks-per-node 4")),
            Some(2)
        );
        assert_eq!(nodes_in(l, &words("srun --nodes=4 -n 32")), Some(4));
        let mpi = Launcher::Mpi;
        assert_eq!(nodes_in(mpi, &words("-np 16 -H a:8,b:8")), Some(2));
        assert_eq!(nodes_in(mpi, &words("-np 16 -npernode 8")), Some(2));
        assert_eq!(nodes_in(mpi, &words("-np 16 --map-by ppr:8:node")), Some(2));
        assert_eq!(nodes_in(mpi, &words("-np 16 --hostfile h")), None);
        assert_eq!(
            launcher_in(&words("/usr/bin/mpirun --hostfile f"))
                .unwrap()
                .1,
            0
        );
        assert!(launcher_in(&words("./build/all_reduce_perf -g 8")).is_none());
    }

    #[test]
    fn the_binary_a_line_names() {
        assert_eq!(
            binary_in(&words("./build/./alltoall_perf")).as_deref(),
            Some("alltoall_perf")
        );
        assert_eq!(
            binary_in(&words(
                ">    /opt/src/nccl-tests/build/all_reduce_perf -b 8 -e 8G"
            ))
            .as_deref(),
            Some("all_reduce_perf")
        );
        assert_eq!(
            binary_in(&words("all_gather_perf -g 8 -b 4294967296")).as_deref(),
            Some("all_gather_perf")
        );
        assert_eq!(
            binary_in(&words("mpirun -np 2 build/sendrecv_perf_mpi -g 1")).as_deref(),
            Some("sendrecv_perf")
        );
        assert_eq!(binary_in(&words("./local_run_inc.sh")), None);
        assert_eq!(binary_in(&words("see _perf and x_perf2")), None);
    }
}
