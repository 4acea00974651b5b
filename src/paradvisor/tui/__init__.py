"""The interactive Textual session: machines -> workload -> ranked plans -> launch -> live monitor."""
