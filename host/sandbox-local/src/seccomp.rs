//! Docker's default seccomp profile, compiled to BPF with seccompiler for bubblewrap's
//! `--add-seccomp-fd`.
//!
//! The allowlist below is moby's `profiles/seccomp/default.json` for x86_64 as it applies to a
//! sandbox with our capability set (Docker's default set without MKNOD and NET_RAW): every
//! syscall the profile allows unconditionally; `ptrace` and `process_vm_*` (kernels ≥ 4.8);
//! `socket` for every family but AF_VSOCK; `personality` for the five personas the profile
//! names; `clone` without namespace flags and `clone3` answered with ENOSYS (so that libc falls
//! back to `clone`), as for a container without CAP_SYS_ADMIN; `chroot` (CAP_SYS_CHROOT is
//! granted); `arch_prctl` and `modify_ldt`. Everything else — `mount`, `unshare`, `setns`,
//! `keyctl`, `add_key`, `bpf`, `perf_event_open`, `kexec_load`, `open_by_handle_at`, module
//! loading, clock setting, ... — fails with EPERM.
//!
//! One difference: seccompiler's filters admit one architecture, so 32-bit (i386) system
//! calls, which Docker's profile also allows, end the process.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// Not in the libc crate's table (x86_64's number).
const SYS_IO_PGETEVENTS: libc::c_long = 333;

/// Allowed whatever their arguments.
#[rustfmt::skip]
const ALLOWED: &[libc::c_long] = &[
    libc::SYS_accept, libc::SYS_accept4, libc::SYS_access, libc::SYS_adjtimex, libc::SYS_alarm, libc::SYS_bind,
    libc::SYS_brk, libc::SYS_capget, libc::SYS_capset, libc::SYS_chdir, libc::SYS_chmod, libc::SYS_chown,
    libc::SYS_clock_adjtime, libc::SYS_clock_getres, libc::SYS_clock_gettime, libc::SYS_clock_nanosleep,
    libc::SYS_close, libc::SYS_close_range, libc::SYS_connect, libc::SYS_copy_file_range, libc::SYS_creat,
    libc::SYS_dup, libc::SYS_dup2, libc::SYS_dup3, libc::SYS_epoll_create, libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl, libc::SYS_epoll_ctl_old, libc::SYS_epoll_pwait, libc::SYS_epoll_pwait2,
    libc::SYS_epoll_wait, libc::SYS_epoll_wait_old, libc::SYS_eventfd, libc::SYS_eventfd2, libc::SYS_execve,
    libc::SYS_execveat, libc::SYS_exit, libc::SYS_exit_group, libc::SYS_faccessat, libc::SYS_faccessat2,
    libc::SYS_fadvise64, libc::SYS_fallocate, libc::SYS_fanotify_mark, libc::SYS_fchdir, libc::SYS_fchmod,
    libc::SYS_fchmodat, libc::SYS_fchown, libc::SYS_fchownat, libc::SYS_fcntl, libc::SYS_fdatasync,
    libc::SYS_fgetxattr, libc::SYS_flistxattr, libc::SYS_flock, libc::SYS_fork, libc::SYS_fremovexattr,
    libc::SYS_fsetxattr, libc::SYS_fstat, libc::SYS_fstatfs, libc::SYS_fsync, libc::SYS_ftruncate,
    libc::SYS_futex, libc::SYS_futex_waitv, libc::SYS_futimesat, libc::SYS_getcpu, libc::SYS_getcwd,
    libc::SYS_getdents, libc::SYS_getdents64, libc::SYS_getegid, libc::SYS_geteuid, libc::SYS_getgid,
    libc::SYS_getgroups, libc::SYS_getitimer, libc::SYS_getpeername, libc::SYS_getpgid, libc::SYS_getpgrp,
    libc::SYS_getpid, libc::SYS_getppid, libc::SYS_getpriority, libc::SYS_getrandom, libc::SYS_getresgid,
    libc::SYS_getresuid, libc::SYS_getrlimit, libc::SYS_get_robust_list, libc::SYS_getrusage, libc::SYS_getsid,
    libc::SYS_getsockname, libc::SYS_getsockopt, libc::SYS_get_thread_area, libc::SYS_gettid,
    libc::SYS_gettimeofday, libc::SYS_getuid, libc::SYS_getxattr, libc::SYS_inotify_add_watch,
    libc::SYS_inotify_init, libc::SYS_inotify_init1, libc::SYS_inotify_rm_watch, libc::SYS_io_cancel,
    libc::SYS_ioctl, libc::SYS_io_destroy, libc::SYS_io_getevents, SYS_IO_PGETEVENTS, libc::SYS_ioprio_get,
    libc::SYS_ioprio_set, libc::SYS_io_setup, libc::SYS_io_submit, libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register, libc::SYS_io_uring_setup, libc::SYS_kill, libc::SYS_landlock_add_rule,
    libc::SYS_landlock_create_ruleset, libc::SYS_landlock_restrict_self, libc::SYS_lchown, libc::SYS_lgetxattr,
    libc::SYS_link, libc::SYS_linkat, libc::SYS_listen, libc::SYS_listxattr, libc::SYS_llistxattr,
    libc::SYS_lremovexattr, libc::SYS_lseek, libc::SYS_lsetxattr, libc::SYS_lstat, libc::SYS_madvise,
    libc::SYS_membarrier, libc::SYS_memfd_create, libc::SYS_memfd_secret, libc::SYS_mincore, libc::SYS_mkdir,
    libc::SYS_mkdirat, libc::SYS_mknod, libc::SYS_mknodat, libc::SYS_mlock, libc::SYS_mlock2, libc::SYS_mlockall,
    libc::SYS_mmap, libc::SYS_mprotect, libc::SYS_mq_getsetattr, libc::SYS_mq_notify, libc::SYS_mq_open,
    libc::SYS_mq_timedreceive, libc::SYS_mq_timedsend, libc::SYS_mq_unlink, libc::SYS_mremap, libc::SYS_msgctl,
    libc::SYS_msgget, libc::SYS_msgrcv, libc::SYS_msgsnd, libc::SYS_msync, libc::SYS_munlock,
    libc::SYS_munlockall, libc::SYS_munmap, libc::SYS_name_to_handle_at, libc::SYS_nanosleep,
    libc::SYS_newfstatat, libc::SYS_open, libc::SYS_openat, libc::SYS_openat2, libc::SYS_pause,
    libc::SYS_pidfd_open, libc::SYS_pidfd_send_signal, libc::SYS_pipe, libc::SYS_pipe2, libc::SYS_pkey_alloc,
    libc::SYS_pkey_free, libc::SYS_pkey_mprotect, libc::SYS_poll, libc::SYS_ppoll, libc::SYS_prctl,
    libc::SYS_pread64, libc::SYS_preadv, libc::SYS_preadv2, libc::SYS_prlimit64, libc::SYS_process_mrelease,
    libc::SYS_pselect6, libc::SYS_pwrite64, libc::SYS_pwritev, libc::SYS_pwritev2, libc::SYS_read,
    libc::SYS_readahead, libc::SYS_readlink, libc::SYS_readlinkat, libc::SYS_readv, libc::SYS_recvfrom,
    libc::SYS_recvmmsg, libc::SYS_recvmsg, libc::SYS_remap_file_pages, libc::SYS_removexattr, libc::SYS_rename,
    libc::SYS_renameat, libc::SYS_renameat2, libc::SYS_restart_syscall, libc::SYS_rmdir, libc::SYS_rseq,
    libc::SYS_rt_sigaction, libc::SYS_rt_sigpending, libc::SYS_rt_sigprocmask, libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_sigreturn, libc::SYS_rt_sigsuspend, libc::SYS_rt_sigtimedwait, libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_sched_getaffinity, libc::SYS_sched_getattr, libc::SYS_sched_getparam,
    libc::SYS_sched_get_priority_max, libc::SYS_sched_get_priority_min, libc::SYS_sched_getscheduler,
    libc::SYS_sched_rr_get_interval, libc::SYS_sched_setaffinity, libc::SYS_sched_setattr,
    libc::SYS_sched_setparam, libc::SYS_sched_setscheduler, libc::SYS_sched_yield, libc::SYS_seccomp,
    libc::SYS_select, libc::SYS_semctl, libc::SYS_semget, libc::SYS_semop, libc::SYS_semtimedop,
    libc::SYS_sendfile, libc::SYS_sendmmsg, libc::SYS_sendmsg, libc::SYS_sendto, libc::SYS_setfsgid,
    libc::SYS_setfsuid, libc::SYS_setgid, libc::SYS_setgroups, libc::SYS_setitimer, libc::SYS_setpgid,
    libc::SYS_setpriority, libc::SYS_setregid, libc::SYS_setresgid, libc::SYS_setresuid, libc::SYS_setreuid,
    libc::SYS_setrlimit, libc::SYS_set_robust_list, libc::SYS_setsid, libc::SYS_setsockopt,
    libc::SYS_set_thread_area, libc::SYS_set_tid_address, libc::SYS_setuid, libc::SYS_setxattr, libc::SYS_shmat,
    libc::SYS_shmctl, libc::SYS_shmdt, libc::SYS_shmget, libc::SYS_shutdown, libc::SYS_sigaltstack,
    libc::SYS_signalfd, libc::SYS_signalfd4, libc::SYS_socketpair, libc::SYS_splice, libc::SYS_stat,
    libc::SYS_statfs, libc::SYS_statx, libc::SYS_symlink, libc::SYS_symlinkat, libc::SYS_sync,
    libc::SYS_sync_file_range, libc::SYS_syncfs, libc::SYS_sysinfo, libc::SYS_tee, libc::SYS_tgkill,
    libc::SYS_time, libc::SYS_timer_create, libc::SYS_timer_delete, libc::SYS_timer_getoverrun,
    libc::SYS_timer_gettime, libc::SYS_timer_settime, libc::SYS_timerfd_create, libc::SYS_timerfd_gettime,
    libc::SYS_timerfd_settime, libc::SYS_times, libc::SYS_tkill, libc::SYS_truncate, libc::SYS_umask,
    libc::SYS_uname, libc::SYS_unlink, libc::SYS_unlinkat, libc::SYS_utime, libc::SYS_utimensat,
    libc::SYS_utimes, libc::SYS_vfork, libc::SYS_vmsplice, libc::SYS_wait4, libc::SYS_waitid, libc::SYS_write,
    libc::SYS_writev,
    // Kernels from 4.8 on: ptrace can no longer bypass seccomp.
    libc::SYS_ptrace, libc::SYS_process_vm_readv, libc::SYS_process_vm_writev,
    // x86_64 only.
    libc::SYS_arch_prctl, libc::SYS_modify_ldt,
    // CAP_SYS_CHROOT is in the granted set.
    libc::SYS_chroot,
];

/// `personality(2)` personas the profile allows: Linux, with UNAME26, READ_IMPLIES_EXEC... and
/// the query (0xffffffff).
const PERSONAS: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];
const AF_VSOCK: u64 = 40;
/// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID |
/// CLONE_NEWNET: `clone` may use none of them.
const CLONE_NAMESPACE_FLAGS: u64 = 0x7E02_0000;

fn condition(index: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(index, len, op, value).map_err(|e| e.to_string())
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

/// The profile as two programs for `--add-seccomp-fd` (the kernel applies both, the strictest
/// answer wins): the allowlist (EPERM for the rest), and `clone3` → ENOSYS.
pub fn docker_default() -> Result<Vec<Vec<u8>>, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED.iter().map(|nr| (*nr, Vec::new())).collect();
    rules.insert(
        libc::SYS_socket,
        vec![rule(vec![condition(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, AF_VSOCK)?])?],
    );
    rules.insert(
        libc::SYS_personality,
        PERSONAS
            .iter()
            .map(|p| rule(vec![condition(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *p)?]))
            .collect::<Result<_, _>>()?,
    );
    rules.insert(
        libc::SYS_clone,
        vec![rule(vec![condition(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(CLONE_NAMESPACE_FLAGS), 0)?])?],
    );
    // Allowed here, refused with ENOSYS by the second program.
    rules.insert(libc::SYS_clone3, Vec::new());
    let allowlist =
        SeccompFilter::new(rules, SeccompAction::Errno(libc::EPERM as u32), SeccompAction::Allow, TargetArch::x86_64)
            .map_err(|e| e.to_string())?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        TargetArch::x86_64,
    )
    .map_err(|e| e.to_string())?;
    [allowlist, clone3]
        .into_iter()
        .map(|f| BpfProgram::try_from(f).map(|p| bytes(&p)).map_err(|e| e.to_string()))
        .collect()
}

/// The program as the kernel's `struct sock_filter` array, which is what bubblewrap reads.
fn bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        out.extend_from_slice(&insn.code.to_ne_bytes());
        out.push(insn.jt);
        out.push(insn.jf);
        out.extend_from_slice(&insn.k.to_ne_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_profile_compiles_to_two_programs() {
        let programs = super::docker_default().unwrap();
        assert_eq!(programs.len(), 2);
        // Each is a whole number of instructions, within the kernel's 4096-instruction limit.
        for p in &programs {
            assert!(!p.is_empty() && p.len() % 8 == 0 && p.len() / 8 <= 4096, "{}", p.len());
        }
    }
}
