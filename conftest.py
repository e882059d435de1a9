"""The workspace's tests opt into agl-testing's pytest plugins here (installing agl-testing enables nothing)."""

pytest_plugins = ["agl.testing.plugin", "agl.testing.store.fixtures"]
