from provenance.llm import backend_label


def model_backend(request) -> dict:
    """Every admin page says which model backend produced what it shows."""
    return {"kintsugi_model_backend": backend_label()}
