package loopback

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"unsafe"
)

// A pod's kernel counters and socket table are its network namespace's. A simulated pod on
// this machine's namespace shares them with everything else the machine runs: a hook that
// reads the kernel without a sidecar (prestop --mesh none) would count other programs'
// accepts (/proc/net/snmp PassiveOpens) as its clients'. So a simulation of such a pod runs
// in a network namespace of its own where the kernel allows one: the simulator re-executes
// itself in a new user and network namespace, brings lo up there, and every client, the app
// and the hook share that namespace alone.

// ownNetnsEnv marks the re-executed process: it is in its own network namespace.
const ownNetnsEnv = "PODSIM_OWN_NETNS"

// InOwnNetns says whether this process was started by OwnNetnsCommand.
func InOwnNetns() bool { return os.Getenv(ownNetnsEnv) == "1" }

// OwnNetnsCommand is this executable run again with args in a new user and network namespace
// (the caller mapped to root there, so that it may bring lo up), with stdio and environment
// inherited. The child must call Up before it opens a socket.
func OwnNetnsCommand(args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this executable: %w", err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), ownNetnsEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	return cmd, nil
}

// CanOwnNetns says whether this machine lets a process make a user and network namespace
// (unprivileged user namespaces may be turned off), by trying it with a short-lived child.
func CanOwnNetns() error {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("no user and network namespace of its own here: %w", err)
	}
	return nil
}

// ifreqFlags is struct ifreq with its flags member (include/uapi/linux/if.h): a 16-byte name,
// then the union, whose first member is short ifr_flags.
type ifreqFlags struct {
	name  [16]byte
	flags uint16
	_     [22]byte
}

// Up brings lo up in this process's network namespace (a new one has it down), as
// `ip link set lo up` does: 127.0.0.0/8 is then routed to lo, and the simulated clients can
// dial from their own addresses.
func Up() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	defer syscall.Close(fd)
	var ifr ifreqFlags
	copy(ifr.name[:], "lo")
	if err := ioctl(fd, syscall.SIOCGIFFLAGS, &ifr); err != nil {
		return fmt.Errorf("bring lo up: read its flags: %w", err)
	}
	ifr.flags |= syscall.IFF_UP | syscall.IFF_RUNNING
	if err := ioctl(fd, syscall.SIOCSIFFLAGS, &ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

func ioctl(fd int, req uintptr, ifr *ifreqFlags) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(ifr))); errno != 0 {
		return errors.New(errno.Error())
	}
	return nil
}
