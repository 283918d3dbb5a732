#!/bin/sh
# A fresh ext4 like lockscope's --fs ext4 (RAM-backed image on its own tmpfs,
# loop device, the same mkfs and mount options), for running a program on it
# without lockscope:
#   bench/fresh_ext4.sh up DIR [SIZE_GIB]    make and mount it on DIR (default 9 GiB image)
#   bench/fresh_ext4.sh down DIR             unmount it, free the loop device and the image
set -e
dir=$2
[ -n "$dir" ] || { echo "usage: $0 up|down DIR [SIZE_GIB]" >&2; exit 2; }
case $1 in
up)
	gib=${3:-9}
	mkdir -p "$dir.img" "$dir"
	mount -t tmpfs -o size=$((gib + 1))g tmpfs "$dir.img"
	truncate -s ${gib}G "$dir.img/image"
	loop=$(losetup -f --show "$dir.img/image")
	# one inode per 2 KiB of image, as lockscope/machine/scratch.py
	mkfs.ext4 -q -F -N $((gib * 1024 * 1024 / 2)) -E lazy_itable_init=1,lazy_journal_init=1,nodiscard "$loop"
	mount -o noatime,noinit_itable "$loop" "$dir"
	echo "$loop on $dir"
	;;
down)
	loop=$(findmnt -n -o SOURCE "$dir")
	umount "$dir"
	losetup -d "$loop"
	umount "$dir.img"
	rmdir "$dir.img" "$dir"
	;;
*)
	echo "usage: $0 up|down DIR [SIZE_GIB]" >&2; exit 2
	;;
esac
