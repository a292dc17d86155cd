"""Where the cluster state lives: one interface (`StateStore`), a file store for
the embedded default and a Kubernetes custom-resource store."""
