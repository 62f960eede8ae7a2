package targets

import (
	"fmt"
	"net/url"
)

// PowerLossMetadata is the knob of every kind with a private instance that
// picks the lazy file system's model of directory entries for
// durability.power-loss: posix (the default: an entry is durable once its
// directory is fsynced) or journal (any fsync commits every namespace change
// before it, as ext4 and xfs do).
const PowerLossMetadata = "power-loss.metadata"

// powerLossKnobs takes the harness's power-loss knobs out of u's query, for
// kinds that start private instances (the others reject them as unknown).
func powerLossKnobs(k *Kind, u *url.URL) (map[string]string, error) {
	q := u.Query()
	if k.StartPrivate == nil || !q.Has(PowerLossMetadata) {
		return nil, nil
	}
	v := q.Get(PowerLossMetadata)
	if v != "posix" && v != "journal" {
		return nil, fmt.Errorf("%w: %s=%q: want posix or journal", ErrBadTarget, PowerLossMetadata, v)
	}
	q.Del(PowerLossMetadata)
	u.RawQuery = q.Encode()
	return map[string]string{PowerLossMetadata: v}, nil
}
