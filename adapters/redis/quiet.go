package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// go-redis logs dial failures and pool events on its own to stderr; durachk
// reports every failure itself, once, through the error it returns, so the
// library's logger is silenced for the whole process.
func init() { goredis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
