"""Vertex AI's v1 JobService REST API on localhost (``trials serve``), over the local controller."""
