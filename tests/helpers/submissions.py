"""submit_experiment arguments as a model sends them: a change with its hypothesis, expectation and a lesson."""


def reasoned(arguments: dict, lesson: str = "The previous result says the schedule matters at this scale.") -> dict:
    """The arguments with a hypothesis, an expected effect and a lesson added where missing."""
    return {"hypothesis": f"{arguments['description']} should lower val_bpb at this scale",
            "expected": "val_bpb -0.001", "lesson": lesson, **arguments}
