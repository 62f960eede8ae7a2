module github.com/durachk/durachk

go 1.26.8
