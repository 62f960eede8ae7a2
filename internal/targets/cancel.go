package targets

import (
	"os/exec"
	"syscall"
	"time"
)

// cancelWait bounds how long Wait waits, once its context ended, for the
// output pipes of a command made by exec.CommandContext.
const cancelWait = 200 * time.Millisecond

// cancelGroup makes cmd, made by exec.CommandContext, end whole with its
// context: it runs in a process group of its own, which the context's end
// SIGKILLs, and Wait returns within cancelWait of that whatever still holds
// its output. A tool that starts a server of its own (mariadb-install-db's
// bootstrap mariadbd, initdb's postgres) outlived a kill of the tool alone,
// holding the output pipe, and Wait with it: SIGINT took 2.6–3.6 s to end
// durachk while a private MariaDB was being installed. Call it after setting
// cmd.SysProcAttr.
func cancelGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = cancelWait
}
