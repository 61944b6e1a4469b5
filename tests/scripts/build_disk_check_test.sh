#!/bin/sh
# scripts/build.sh on a nearly full disk: it must refuse before configuring anything, saying how
# much is free, where, and what to do (a full disk otherwise makes the compiler fail silently).
# A df earlier on PATH reports 1 MiB free on the checkout's filesystem.
#   build_disk_check_test.sh SOURCE_DIR
set -u
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/df" <<'DF'
#!/bin/sh
echo "Filesystem 1024-blocks Used Available Capacity Mounted on"
echo "/dev/fake 262144000 262143000 1024 100% /fake-mount"
DF
chmod +x "$tmp/df"
PATH="$tmp:$PATH" BUILD_DIR="$tmp/build" bash "$root/scripts/build.sh" > "$tmp/out" 2> "$tmp/err"
rc=$?
fail() { echo "FAIL: $1"; echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; cat "$tmp/err"; exit 1; }
[ "$rc" -eq 1 ] || fail "build.sh exited $rc, not 1"
grep -q "build: only 1 MiB free on /fake-mount" "$tmp/err" || fail "no message naming the free space and mount"
grep -q "a build needs about 4 GiB. Free some space" "$tmp/err" || fail "no message saying what to do"
[ ! -e "$tmp/build" ] || fail "build.sh configured a build tree before refusing"
echo "build.sh refused a nearly full disk: $(cat "$tmp/err")"
