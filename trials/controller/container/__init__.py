"""The container backend: replicas as containers of their pools' images (podman or docker), as Vertex runs them."""
