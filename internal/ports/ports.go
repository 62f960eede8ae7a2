// Package ports hands out the TCP ports of private brokers and of fault
// proxies: below the kernel's ephemeral range, free on every address, and
// reserved machine-wide against every other durachk process (an abstract
// Unix socket named after the port), so that two processes never draw one
// port and a port a proxy gives up for a moment is not taken meanwhile.
package ports

import (
	mrand "math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Free returns a port that ip can bind and that no socket holds on any
// address, drawn below the kernel's ephemeral range and reserved against
// every other durachk process of the machine.
//
// Free on ip is not enough: the port must be free on every address.
// RabbitMQ's prelaunch checks its distribution port with a wildcard bind
// (0.0.0.0), and a port that something holds on another address — the
// private clusters of this machine listen on 127.0.x.y — makes the node
// exit with status 1 (dist_port_already_used) before it logs anything;
// epmd listens on ::1 as well. A cluster node's ports were checked on its
// own address only (targets.FreePortOn): a node died with {dist_port_already_used,
// 42145, not_erlang} while other tests ran. And a port from the kernel's
// ephemeral range is what every other process's bind(0) draws from too
// (other runs' brokers, before they bind): below that range only a port
// chosen the same way can collide. Free when drawn is not free when bound
// seconds later: another durachk process (a test package beside this one,
// a run beside this run) may draw it meanwhile — a RabbitMQ node died in CI
// with {dist_port_already_used, 30666, not_erlang} on 2026-12-06 — so a
// draw is reserved machine-wide (drawnPorts.take), and the extcluster
// script draws from above this range (tools/extcluster/cluster.sh). A
// machine whose ephemeral range leaves no room below it gets one from the
// kernel, checked as before.
func Free(ip string) (int, error) {
	lo, hi := stablePorts()
	for try := 0; try < 200 && hi > lo; try++ {
		port := lo + mrand.IntN(hi-lo)
		if drawn.take(port) && freeEverywhere(port) && bindable(ip, port) {
			return port, nil
		}
	}
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if freeEverywhere(port) || try == 20 {
			return port, nil
		}
	}
}

// drawn holds the ports this process handed out in the last minutes: a
// cluster draws all its nodes' ports before any node binds one, and must not
// draw one twice; nor may another durachk process draw them.
var drawn = drawnPorts{at: map[int]reservation{}}

// reserveFor is how long a drawn port stays reserved: long past the bind of
// the slowest broker start (a RabbitMQ cluster node: tens of seconds).
const reserveFor = 10 * time.Minute

type drawnPorts struct {
	sync.Mutex
	at map[int]reservation
}

// reservation is a drawn port: when, and the machine-wide claim on it.
type reservation struct {
	at time.Time
	// claim is a listening Unix socket in the abstract namespace named after
	// the port: bound by one process at a time, machine-wide (per network
	// namespace), and gone with its process, even a SIGKILLed one — no file
	// to clean up.
	claim net.Listener
}

// take marks port handed out and reports whether it was free to hand out:
// not handed out by this process in the last reserveFor, and not reserved
// by another process.
func (d *drawnPorts) take(port int) bool {
	d.Lock()
	defer d.Unlock()
	now := time.Now()
	if r, ok := d.at[port]; ok {
		if now.Sub(r.at) < reserveFor {
			return false
		}
		r.release()
		delete(d.at, port)
	}
	if len(d.at) > 4096 {
		for p, r := range d.at {
			if now.Sub(r.at) >= reserveFor {
				r.release()
				delete(d.at, p)
			}
		}
	}
	claim, ok := claimPort(port)
	if !ok {
		return false // another process holds it (or cannot tell: draw another)
	}
	d.at[port] = reservation{at: now, claim: claim}
	return true
}

func (r reservation) release() {
	if r.claim != nil {
		r.claim.Close()
	}
}

// stablePorts is the range private brokers' ports are drawn from: from
// 10000 up to 20000, or to the start of the kernel's ephemeral range
// (net.ipv4.ip_local_port_range; 32768 where it cannot be read) when that
// comes first. 20000 up is the extcluster script's (clusters durachk did
// not start, in its tests). Empty (lo ≥ hi) when the ephemeral range
// starts at 10000 or below.
func stablePorts() (lo, hi int) {
	hi = 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return 10000, min(hi, 20000)
}

// freeEverywhere reports whether port can be bound on the wildcard address
// (dual-stack where the machine has IPv6): no socket holds it on any
// address. It binds without listening: nothing can connect meanwhile.
// SO_REUSEADDR as servers set it: a connection in TIME_WAIT does not count.
func freeEverywhere(port int) bool {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	var sa syscall.Sockaddr = &syscall.SockaddrInet6{Port: port}
	if err != nil {
		if fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0); err != nil {
			return true // cannot tell: as before
		}
		sa = &syscall.SockaddrInet4{Port: port}
	} else {
		_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0)
	}
	defer syscall.Close(fd)
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	return syscall.Bind(fd, sa) == nil
}

// Claim returns a port drawn as Free draws it, free on ip, and reserved until
// release is called (not for a fixed time): a fault proxy's port, which it
// gives up while its link is down (connections are refused) and listens on
// again when it is up. Left unreserved, another process's bind took it
// meanwhile, and a client of one exploration round reached another round's
// broker through that process's proxy (2026-12-06). A machine whose
// ephemeral range leaves no room below it gets a port from the kernel,
// unreserved.
func Claim(ip string) (port int, release func(), err error) {
	lo, hi := stablePorts()
	for try := 0; try < 200 && hi > lo; try++ {
		port := lo + mrand.IntN(hi-lo)
		c, ok := claimPort(port)
		if !ok {
			continue
		}
		if !freeEverywhere(port) || !bindable(ip, port) {
			c.Close()
			continue
		}
		return port, func() { c.Close() }, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, nil, err
	}
	port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port, func() {}, nil
}

// claimPort takes the machine-wide claim on port: false if another holds it.
func claimPort(port int) (net.Listener, bool) {
	c, err := net.Listen("unix", "@durachk-port-"+strconv.Itoa(port))
	return c, err == nil
}

// bindable reports whether ip can listen on port now.
func bindable(ip string, port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
