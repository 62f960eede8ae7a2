package contracts

import (
	"strings"

	"github.com/durachk/durachk/adapters"
)

// NoPowerLoss prefixes the capability note in which a target says why the
// harness cannot cut its broker's power.
const NoPowerLoss = "power loss unavailable: "

func needsPowerLoss(c adapters.Capabilities) string {
	if c.PowerLoss {
		return ""
	}
	for _, prefix := range []string{NoPowerLoss, BrokerFaultsNote} {
		for _, n := range c.Notes {
			if why, ok := strings.CutPrefix(n, prefix); ok {
				return "the harness cannot cut this broker's power: " + why
			}
		}
	}
	return "the harness cannot cut this broker's power: it needs a private instance of the broker on a lazy (FUSE) file system"
}
