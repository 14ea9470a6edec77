def handler(event):
    user = event["old_image"]
    print(f"User deleted: {user['id']}")
