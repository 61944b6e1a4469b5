#!/bin/sh
# scripts/build.sh on a nearly full disk: it must refuse before configuring anything, saying how
# much is free, where, and what to do (a full disk otherwise makes the compiler fail silently). A
# new tree needs 4 GiB; a tree already configured (CI's fuzz stage builds in the suite's tree)
# needs 1 GiB, and must not be refused with more.
# A df earlier on PATH reports FAKE_FREE_KIB free on the checkout's filesystem; a cmake earlier on
# PATH records that it was run, so no build is made.
#   build_disk_check_test.sh SOURCE_DIR
set -u
root=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/df" <<'DF'
#!/bin/sh
echo "Filesystem 1024-blocks Used Available Capacity Mounted on"
echo "/dev/fake 262144000 262143000 $FAKE_FREE_KIB 100% /fake-mount"
DF
cat > "$tmp/cmake" <<'CMAKE'
#!/bin/sh
echo "cmake $*" >> "$FAKE_CMAKE_LOG"
CMAKE
chmod +x "$tmp/df" "$tmp/cmake"
fail() { echo "FAIL: $1"; echo "--- stdout"; cat "$tmp/out"; echo "--- stderr"; cat "$tmp/err"; exit 1; }
# build.sh with FREE_KIB free and BUILD_DIR as build tree; sets rc.
run() {
  rm -f "$tmp/cmake.log"
  FAKE_FREE_KIB=$1 FAKE_CMAKE_LOG="$tmp/cmake.log" PATH="$tmp:$PATH" BUILD_DIR="$2" \
    bash "$root/scripts/build.sh" > "$tmp/out" 2> "$tmp/err"
  rc=$?
}

# A new tree, 1 MiB free: refused, nothing configured.
run 1024 "$tmp/build"
[ "$rc" -eq 1 ] || fail "new tree, 1 MiB free: build.sh exited $rc, not 1"
grep -q "build: only 1 MiB free on /fake-mount" "$tmp/err" || fail "no message naming the free space and mount"
grep -q "a new build tree ($tmp/build/) needs about 4 GiB. Free some space" "$tmp/err" ||
  fail "no message saying what a new tree needs and what to do"
[ ! -e "$tmp/build" ] || fail "build.sh created a build tree before refusing"
[ ! -e "$tmp/cmake.log" ] || fail "build.sh ran cmake before refusing"
echo "refused a new tree: $(cat "$tmp/err")"

# A new tree, 2 GiB free: still refused.
run $((2 * 1024 * 1024)) "$tmp/build"
[ "$rc" -eq 1 ] || fail "new tree, 2 GiB free: build.sh exited $rc, not 1"

# A configured tree, 2 GiB free: built (cmake configures and builds it).
mkdir -p "$tmp/built" && : > "$tmp/built/build.ninja"
run $((2 * 1024 * 1024)) "$tmp/built"
[ "$rc" -eq 0 ] || fail "configured tree, 2 GiB free: build.sh exited $rc, not 0"
grep -q "^cmake --build $tmp/built" "$tmp/cmake.log" || fail "configured tree, 2 GiB free: no cmake --build"

# A configured tree, 512 MiB free: refused, saying it needs 1 GiB.
run $((512 * 1024)) "$tmp/built"
[ "$rc" -eq 1 ] || fail "configured tree, 512 MiB free: build.sh exited $rc, not 1"
grep -q "a build in the existing $tmp/built/ needs about 1 GiB" "$tmp/err" ||
  fail "no message saying what a configured tree needs"
[ ! -e "$tmp/cmake.log" ] || fail "build.sh ran cmake before refusing"
echo "refused a configured tree: $(cat "$tmp/err")"
