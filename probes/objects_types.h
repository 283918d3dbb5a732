/* SPDX-License-Identifier: MIT */
/* objects.bpf.c's records: the files and tasks its iterators reach, with
 * their lock fields. Shared by the BPF side and the loader (probe.h
 * includes every *_types.h): free of kernel or libc headers, both sides
 * include it after their own. */
#ifndef LOCKSCOPE_OBJECTS_TYPES_H
#define LOCKSCOPE_OBJECTS_TYPES_H

#include "common_types.h"

/* records written by the object iterators (objects.bpf.c) */
enum obj_type {
	OBJ_FILE = 1,
	OBJ_TASK = 2,
	OBJ_SB = 3,
};

/* a mounted file system's superblock (every one the kernel has: lksc_iter_sbs) */
struct obj_sb {
	__u32 type;           /* OBJ_SB */
	__u32 dev;            /* s_dev, a key of the record's mounts */
	__u64 sb;
	__u64 s_fs_info;      /* the file system's own part (shmem_sb_info, ext4_sb_info, ...) */
	char fstype[16];
};

/* the lock fields of both records are generated from analyzer/kernel/lockfields.toml
 * (build/lockfields.h): one __u64 address per field, 0 when not reached */
struct obj_file {
	__u32 type;           /* OBJ_FILE */
	__u32 tgid;
	__u32 fd;
	__u32 i_mode;
	__u64 ino;
	__u32 dev;            /* sb->s_dev */
	__u32 pad;
	char fstype[16];
	__u64 inode;
	__u64 sb;
	__u64 parent_inode;
	__u64 parent_ino;
	/* the objects behind the file, typed offline (analyzer/kernel/fileobjects.toml) */
	__u64 file;
	__u64 f_release;      /* f_op->release: its text symbol tells the kind */
	__u64 private_data;
	__u64 i_flctx;        /* struct file_lock_context */
	__u64 s_fs_info;
	__u64 sk;             /* sockets: socket->sk */
	__u16 sk_family;
	__u16 sk_type;
	__u16 sk_protocol;
	__u16 sport;          /* host order */
	__u16 dport;          /* host order */
	__u16 unix_len;       /* unix sockets: bytes of sun_path bound (0: unbound) */
	__u32 saddr;          /* IPv4, network order */
	__u32 daddr;
	__u32 pad2;
	char unix_path[112];  /* sun_path (108); abstract names start with a 0 byte */
	LOCKFIELD_KEYS_FILE(LOCKFIELD_MEMBER)
};

struct obj_task {
	__u32 type;           /* OBJ_TASK */
	__u32 tgid;
	__u32 pid;
	__u32 cpu;            /* the CPU the thread was on */
	char comm[16];
	__u64 mm;
	/* the objects the thread holds, typed offline (analyzer/kernel/objlocks.py) */
	__u64 task;
	__u64 signal;
	__u64 files;
	__u64 fs;
	__u64 sighand;
	__u64 ipc_ns;         /* task->nsproxy->ipc_ns: SysV IPC ids (their rwsems) */
	/* the file system of the working directory (fs->pwd): a program's
	 * files live there even when none is open (tmpfs used_blocks, ...) */
	__u64 cwd_sb;
	__u64 cwd_fs_info;    /* its s_fs_info */
	__u32 cwd_dev;        /* its s_dev, a key of the record's mounts */
	__u32 ppid;           /* real_parent->tgid: the process that started it */
	char cwd_fstype[16];
	LOCKFIELD_KEYS_TASK(LOCKFIELD_MEMBER)
};

#endif
